/* Python values into the plan (args.c): with the GIL, in the parent. Each
 * function is 0 (or a count), or -1 with a Python exception set; the bytes
 * a plan points at are kept alive by the list `keep`. */
#ifndef HOSTCAP_CHILDSETUP_ARGS_H
#define HOSTCAP_CHILDSETUP_ARGS_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "childsetup.h"

/* The one loop: call `each` on every item of `seq`, which must have between
 * `min` and `max` items (else ValueError `bad_count`); the count, or -1. */
typedef int (*item_fn)(PyObject *item, Py_ssize_t i, void *ctx);
Py_ssize_t each_item(PyObject *seq, Py_ssize_t min, Py_ssize_t max, const char *bad_count,
                     item_fn each, void *ctx);

/* bytes or None -> const char* */
int opt_cstring(PyObject *obj, PyObject *keep, const char **out);
/* A NULL-terminated char*[] (PyMem_Free it) of the bytes in `seq`, or NULL. */
char **to_cstrings(PyObject *seq, PyObject *keep, const char *what);

int parse_mounts(PyObject *mounts, struct plan *p, PyObject *keep);
int parse_roots(PyObject *roots, struct plan *p, PyObject *keep);
int parse_cgroup_fds(PyObject *fds, struct plan *p);
int parse_rlimits(PyObject *rlimits, struct plan *p);
int parse_landlock_rules(PyObject *rules, struct plan *p, PyObject *keep);
/* A sequence of `min` to `max` ints into `out`; the count, or -1. */
Py_ssize_t parse_fds(PyObject *seq, int *out, Py_ssize_t min, Py_ssize_t max, const char *bad_count);

#endif
