"""The compiled part of the package: the extender's sample reader (``agent/extender/_sample.c``)
and its reader of a one-slot pod (``agent/extender/_podread.c``).

Optional: where no C compiler or no Python headers are found, the package installs without it and the
extender reads the names in Python (same answers, more CPU per call; ``agent/extender/sample.py``).
Everything else about the package is in pyproject.toml.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "agent.extender._sample",
            [
                "agent/extender/_sample.c",
                "agent/extender/_podread.c",
                "agent/extender/_fastpath.c",
                "agent/extender/_fastbooks.c",
            ],
            depends=[
                "agent/extender/_podread.h",
                "agent/extender/_sample.h",
                "agent/extender/_fastpath.h",
                "agent/extender/_fastbooks.h",
            ],
            optional=True,
            extra_compile_args=[
                "-O2",
                "-std=c11",
                "-Wall",
                "-Wextra",
                "-Wno-unused-parameter",
                "-Wno-missing-field-initializers",
            ],
        )
    ]
)
