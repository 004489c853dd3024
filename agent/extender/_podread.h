/* The pod of a prioritize call read from the request's bytes (_podread.c), for the module of _sample.c. */
#ifndef FPGA_SLOT_PODREAD_H
#define FPGA_SLOT_PODREAD_H
#define PY_SSIZE_T_CLEAN
#include <Python.h>

/* (pod, bitstream, start) when the members of body[:end] hold a pod that asks one slot of one bitstream and
 * nothing else (start: where the names array begins, passed through), else None (a new reference; NULL with
 * the error set when out of memory). */
PyObject *one_slot_pod(const char *body, Py_ssize_t end, Py_ssize_t start);

#endif
