/* Python values into the plan's bounded C arrays (the parent's side, with
 * the GIL): one loop (each_item) and a small function per item's shape. */
#include "args.h"

Py_ssize_t each_item(PyObject *seq, Py_ssize_t min, Py_ssize_t max, const char *bad_count,
                     item_fn each, void *ctx)
{
    Py_ssize_t n = PySequence_Length(seq);
    if (n < min || n > max) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_ValueError, bad_count);
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = PySequence_GetItem(seq, i);
        int ok = item && each(item, i, ctx) == 0;
        Py_XDECREF(item);
        if (!ok)
            return -1;
    }
    return n;
}

/* What an item function needs besides the item. */
struct into {
    struct plan *p;
    PyObject *keep;
    const char *what;
    void *out;
};

int opt_cstring(PyObject *obj, PyObject *keep, const char **out)
{
    if (obj == Py_None) {
        *out = NULL;
        return 0;
    }
    if (!PyBytes_Check(obj)) {
        PyErr_SetString(PyExc_TypeError, "expected bytes or None");
        return -1;
    }
    if (PyList_Append(keep, obj) != 0)
        return -1;
    *out = PyBytes_AS_STRING(obj);
    return 0;
}

static int cstring_item(PyObject *item, Py_ssize_t i, void *ctx)
{
    struct into *to = ctx;
    if (!PyBytes_Check(item)) {
        PyErr_Format(PyExc_TypeError, "%s items must be bytes", to->what);
        return -1;
    }
    if ((Py_ssize_t)strlen(PyBytes_AS_STRING(item)) != PyBytes_GET_SIZE(item)) {
        PyErr_Format(PyExc_ValueError, "%s item contains a NUL byte", to->what);
        return -1;
    }
    if (PyList_Append(to->keep, item) != 0)
        return -1;
    ((char **)to->out)[i] = PyBytes_AS_STRING(item);
    return 0;
}

char **to_cstrings(PyObject *seq, PyObject *keep, const char *what)
{
    Py_ssize_t n = PySequence_Length(seq);
    if (n < 0)
        return NULL;
    char **out = PyMem_Calloc((size_t)n + 1, sizeof(char *));
    if (!out) {
        PyErr_NoMemory();
        return NULL;
    }
    struct into to = {NULL, keep, what, out};
    if (each_item(seq, 0, n, "a sequence changed while read", cstring_item, &to) < 0) {
        PyMem_Free(out);
        return NULL;
    }
    return out;
}

static int mount_item(PyObject *item, Py_ssize_t i, void *ctx)
{
    struct into *to = ctx;
    PyObject *src, *tgt, *fst, *dat;
    unsigned long flags, clear = 0;
    int kind;
    if (!PyArg_ParseTuple(item, "iOOOkO|k;mount must be (kind, source, target, fstype, flags, data[, clear])",
                          &kind, &src, &tgt, &fst, &flags, &dat, &clear))
        return -1;
    if (kind < MOUNT_CALL || kind > MOUNT_PIVOT) {
        PyErr_SetString(PyExc_ValueError, "unknown mount kind");
        return -1;
    }
    struct mount_op *m = &to->p->mounts[i];
    m->kind = kind;
    m->flags = flags;
    m->clear = clear;
    if (opt_cstring(src, to->keep, &m->source) != 0 || opt_cstring(tgt, to->keep, &m->target) != 0 ||
        opt_cstring(fst, to->keep, &m->fstype) != 0 || opt_cstring(dat, to->keep, &m->data) != 0)
        return -1;
    return 0;
}

int parse_mounts(PyObject *mounts, struct plan *p, PyObject *keep)
{
    struct into to = {p, keep, NULL, NULL};
    Py_ssize_t n = each_item(mounts, 0, MAX_MOUNTS, "too many mounts", mount_item, &to);
    if (n < 0)
        return -1;
    p->n_mounts = (int)n;
    return 0;
}

static int root_item(PyObject *item, Py_ssize_t i, void *ctx)
{
    struct into *to = ctx;
    if (opt_cstring(item, to->keep, &to->p->roots[i]) != 0)
        return -1;
    if (!to->p->roots[i]) {
        PyErr_SetString(PyExc_TypeError, "roots must be bytes");
        return -1;
    }
    return 0;
}

int parse_roots(PyObject *roots, struct plan *p, PyObject *keep)
{
    struct into to = {p, keep, NULL, NULL};
    Py_ssize_t n = each_item(roots, 0, MAX_ROOTS, "too many roots", root_item, &to);
    if (n < 0)
        return -1;
    p->n_roots = (int)n;
    return 0;
}

static int int_item(PyObject *item, Py_ssize_t i, void *ctx)
{
    int *out = ctx;
    out[i] = (int)PyLong_AsLong(item);
    return PyErr_Occurred() ? -1 : 0;
}

Py_ssize_t parse_fds(PyObject *seq, int *out, Py_ssize_t min, Py_ssize_t max, const char *bad_count)
{
    return each_item(seq, min, max, bad_count, int_item, out);
}

int parse_cgroup_fds(PyObject *fds, struct plan *p)
{
    Py_ssize_t n = parse_fds(fds, p->cgroup_fds, 0, MAX_CGROUP_FDS, "too many cgroup fds");
    if (n < 0)
        return -1;
    p->n_cgroup_fds = (int)n;
    return 0;
}

static int rlimit_item(PyObject *item, Py_ssize_t i, void *ctx)
{
    struct into *to = ctx;
    unsigned long long soft, hard;
    if (!PyArg_ParseTuple(item, "iKK;rlimit must be (resource, soft, hard)",
                          &to->p->rlimits[i].resource, &soft, &hard))
        return -1;
    to->p->rlimits[i].lim.rlim_cur = (rlim_t)soft;
    to->p->rlimits[i].lim.rlim_max = (rlim_t)hard;
    return 0;
}

int parse_rlimits(PyObject *rlimits, struct plan *p)
{
    struct into to = {p, NULL, NULL, NULL};
    Py_ssize_t n = each_item(rlimits, 0, MAX_RLIMITS, "too many rlimits", rlimit_item, &to);
    if (n < 0)
        return -1;
    p->n_rlimits = (int)n;
    return 0;
}

static int landlock_item(PyObject *item, Py_ssize_t i, void *ctx)
{
    struct into *to = ctx;
    PyObject *path;
    unsigned long long access;
    if (!PyArg_ParseTuple(item, "OK;landlock rule must be (path, access)", &path, &access))
        return -1;
    if (opt_cstring(path, to->keep, &to->p->landlock_rules[i].path) != 0)
        return -1;
    if (!to->p->landlock_rules[i].path) {
        PyErr_SetString(PyExc_ValueError, "landlock rule path must be bytes");
        return -1;
    }
    to->p->landlock_rules[i].access = access;
    return 0;
}

int parse_landlock_rules(PyObject *rules, struct plan *p, PyObject *keep)
{
    struct into to = {p, keep, NULL, NULL};
    Py_ssize_t n = each_item(rules, 0, MAX_LANDLOCK_RULES, "too many landlock rules",
                             landlock_item, &to);
    if (n < 0)
        return -1;
    p->n_landlock_rules = (int)n;
    return 0;
}
