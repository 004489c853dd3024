/* The extender's HTTP fast path (_fastpath.c), a type of the module of _sample.c. */
#ifndef FPGA_SLOT_FASTPATH_H
#define FPGA_SLOT_FASTPATH_H
#define PY_SSIZE_T_CLEAN
#include <Python.h>

extern PyTypeObject FastPathType;

/* Make the type ready (once, at module init): 0, or -1 with the error set. */
int fastpath_ready(void);

#endif
