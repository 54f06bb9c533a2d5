/* The Python module hostcapd._childsetup: spawn, go and mount_namespace,
 * which turn their arguments into a plan (args.c) and hand it to the set-up
 * (setup.c, init.c, warm.c, mntns.c); SetupError carries a failed step. */
#include "args.h"

#define STEP_NAME(id, name) [id] = name,
const char *const step_names[N_STEPS] = { SETUP_STEPS(STEP_NAME) };
#undef STEP_NAME

static PyObject *SetupError;

/* SetupError(step, errno) from the plan's failure. */
static void raise_setup_error(const struct plan *p)
{
    PyObject *exc_args = Py_BuildValue("(si)", step_names[p->fail_step], p->fail_errno);
    if (exc_args) {
        PyErr_SetObject(SetupError, exc_args);
        Py_DECREF(exc_args);
    }
}

/* A plan and a stack from the pools (pools.c), or NULL with OSError. */
static struct plan *take_plan(void)
{
    struct plan *p = plan_take();
    if (!p)
        PyErr_SetFromErrno(PyExc_OSError);
    return p;
}

static char *take_stack(void)
{
    char *stack = stack_take();
    if (!stack)
        PyErr_SetFromErrno(PyExc_OSError);
    return stack;
}

PyDoc_STRVAR(spawn_doc,
"spawn(*, exe_fd, exe_path, argv, envp, stdio, cwd_root, cwd, umask, clone_flags, mounts,\n"
"      hostname, loopback_up, cgroup_fds, rlimits, oom_score_adj, loginuid,\n"
"      drop_caps, ids, no_new_privs, landlock_fd, landlock_rules,\n"
"      seccomp_filter, pdeathsig, cancel_fd, life_fd[, go_fd, go_timeout_ms, netns_fd,\n"
"      mntns_fd, init, warm_channel, roots, ipcns_fd, mntns_copy, tty_fd, tty_size])\n"
"      -> pid, or (pid, report_fd)\n"
"      with init\n\n"
"Clone a child that applies the prepared set-up in order and execs.\n"
"exe_fd >= 0 execs that fd (execveat AT_EMPTY_PATH), else exe_path.\n"
"argv, envp: lists of bytes. stdio: (in, out, err) fds.\n"
"cwd_root, cwd: bytes or None: the child opens cwd beneath cwd_root (openat2\n"
"  RESOLVE_BENEATH) after its mounts and fchdir()s there after the uid switch.\n"
"umask: int, or -1 to inherit.\n"
"mounts: [(kind, source, target, fstype, flags, data[, clear])]: kind 0 mount(2);\n"
"  1 keep: clone the tree at source into slot `flags`; 2 restore: mkdir -p\n"
"  target and attach slot `flags` there; 3 mount_setattr(target, set=flags,\n"
"  clear=clear); 4 the same for every mount beneath target; 5 symlink target\n"
"  -> source; 6 mkdir -p target; 7 pivot_root into target, old root detached.\n"
"cgroup_fds: fds of cgroup.procs files the child writes \"0\" to.\n"
"rlimits: [(resource, soft, hard)]. ids: (uid, gid) or None.\n"
"landlock_rules: [(path, access)] added to landlock_fd after the mounts.\n"
"seccomp_filter: bytes of struct sock_filter[] (empty: none).\n"
"netns_fd >= 0: join that network namespace (instead of CLONE_NEWNET).\n"
"ipcns_fd >= 0: join that IPC namespace (an environment's). mntns_copy: after\n"
"joining mntns_fd, unshare a copy of it (an environment's, shared by its spawns).\n"
"mntns_fd >= 0: join that mount namespace (made by mount_namespace, instead of\n"
"  CLONE_NEWNS) before the mounts, which are then only this spawn's own.\n"
"go_fd >= 0: right before exec, wait up to go_timeout_ms for it to be readable\n"
"  (a cancel or the spawner's death ends the wait: nothing is executed).\n"
"init (needs CLONE_NEWPID): the child stays as pid 1, a minimal init, and\n"
"  the command runs as its pid 2; report_fd (O_CLOEXEC, the caller's) gives\n"
"  the init's exit record once it ended (see init_main).\n"
"tty_fd >= 0 (a socket), tty_size (rows, cols): the command runs on a terminal of a\n"
"  devpts instance mounted in its mount namespace, in a session of its own;\n"
"  the master is sent on tty_fd (SCM_RIGHTS) before the exec (see pty.c).\n"
"Raises SetupError(step, errno) if a step fails (the child is reaped).");

static PyObject *childsetup_spawn(PyObject *self, PyObject *args, PyObject *kwargs)
{
    (void)self;
    static char *kwlist[] = {
        "exe_fd", "exe_path", "argv", "envp", "stdio", "cwd_root", "cwd", "umask", "clone_flags",
        "mounts", "hostname", "loopback_up", "cgroup_fds", "rlimits", "oom_score_adj",
        "loginuid", "drop_caps", "ids", "no_new_privs", "landlock_fd", "landlock_rules",
        "seccomp_filter", "pdeathsig", "cancel_fd", "life_fd", "go_fd", "go_timeout_ms", "netns_fd",
        "mntns_fd", "init", "warm_channel", "roots", "ipcns_fd", "mntns_copy", "tty_fd", "tty_size",
        NULL,
    };
    /* Every argument but go_fd and go_timeout_ms is required: the sentinels
     * below say which one a call left out (the format makes all optional). */
    const int unset = INT_MIN;
    int exe_fd = unset, umask_value = unset, clone_flags = unset, loopback = unset;
    int drop_caps = unset, no_new_privs = unset, landlock_fd = unset, pdeathsig = unset;
    int cancel_fd = unset, life_fd = unset, go_fd = -1, go_timeout_ms = 30000, netns_fd = -1;
    int mntns_fd = -1, init = 0, warm_channel = -1, ipcns_fd = -1, mntns_copy = 0;
    int tty_fd = -1;
    PyObject *tty_size = NULL;
    PyObject *warm_roots = NULL;
    PyObject *exe_path = NULL, *argv = NULL, *envp = NULL, *stdio = NULL, *cwd_root = NULL;
    PyObject *cwd = NULL, *mounts = NULL, *hostname = NULL, *cgroup_fds = NULL, *rlimits = NULL;
    PyObject *oom = NULL, *loginuid = NULL, *ids = NULL, *landlock_rules = NULL;
    Py_buffer filter = {0};
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|$iOOOOOOiiOOpOOOOpOpiOy*iiiiiiipiOipiO:spawn", kwlist,
                                     &exe_fd, &exe_path, &argv, &envp, &stdio, &cwd_root,
                                     &cwd, &umask_value, &clone_flags, &mounts, &hostname, &loopback,
                                     &cgroup_fds, &rlimits, &oom, &loginuid, &drop_caps, &ids,
                                     &no_new_privs, &landlock_fd, &landlock_rules, &filter,
                                     &pdeathsig, &cancel_fd, &life_fd, &go_fd, &go_timeout_ms, &netns_fd,
                                     &mntns_fd, &init, &warm_channel, &warm_roots, &ipcns_fd,
                                     &mntns_copy, &tty_fd, &tty_size))
        return NULL;
    if (exe_fd == unset || umask_value == unset || clone_flags == unset || loopback == unset ||
        drop_caps == unset || no_new_privs == unset || landlock_fd == unset ||
        pdeathsig == unset || cancel_fd == unset || life_fd == unset || !exe_path || !argv ||
        !envp || !stdio || !cwd_root || !cwd || !mounts || !hostname || !cgroup_fds ||
        !rlimits || !oom || !loginuid || !ids || !landlock_rules || !filter.obj) {
        if (filter.obj)
            PyBuffer_Release(&filter);
        PyErr_SetString(PyExc_TypeError, "spawn() is missing a required keyword argument");
        return NULL;
    }

    struct plan *p = NULL;
    char *stack = NULL;
    PyObject *result = NULL;
    PyObject *keep = PyList_New(0);
    if (!keep)
        goto done;
    /* The plan lives in its own mapping: the child writes its result there. */
    if (!(p = take_plan()))
        goto done;
    p->exe_fd = exe_fd;
    p->cwd_fd = -1;
    p->umask = umask_value;
    p->loopback_up = loopback;
    for (int i = 0; i < MAX_TREES; i++)
        p->trees[i] = -1;
    p->clone_flags = clone_flags;
    p->drop_caps = drop_caps;
    p->no_new_privs = no_new_privs;
    p->landlock_fd = landlock_fd;
    p->pdeathsig = pdeathsig;
    p->cancel_fd = cancel_fd;
    p->life_fd = life_fd;
    p->go_fd = go_fd;
    p->go_timeout_ms = go_timeout_ms;
    p->netns_fd = netns_fd;
    p->mntns_fd = mntns_fd;
    p->mntns_copy = mntns_copy;
    p->ipcns_fd = ipcns_fd;
    p->init = init;
    p->report_fd = p->report_read = -1;
    p->warm = warm_channel >= 0;
    p->preclone = warm_preclone;
    p->preclone_vfork = preclone_vfork;
    p->init_setsid = init_setsid_enabled;
    p->channel_fd = warm_channel;
    p->tty_fd = tty_fd;
    p->tty_rows = p->tty_cols = 0;
    p->tty_slave = -1;
    if (tty_size && tty_size != Py_None &&
        !PyArg_ParseTuple(tty_size, "ii;tty_size must be (rows, cols)", &p->tty_rows, &p->tty_cols))
        goto done;
    if (tty_fd >= 0 && (p->warm || !(p->tty_rows > 0 && p->tty_rows <= 0xffff && p->tty_cols > 0 &&
                                     p->tty_cols <= 0xffff))) {
        PyErr_SetString(PyExc_ValueError, "a terminal needs its size, and no warm child");
        goto done;
    }

    if (opt_cstring(exe_path, keep, &p->exe_path) < 0 || opt_cstring(cwd, keep, &p->cwd) < 0 ||
        opt_cstring(cwd_root, keep, &p->cwd_root) < 0 ||
        opt_cstring(hostname, keep, &p->hostname) < 0 || opt_cstring(oom, keep, &p->oom_score_adj) < 0 ||
        opt_cstring(loginuid, keep, &p->loginuid) < 0)
        goto done;
    if (exe_fd < 0 && !p->exe_path && warm_channel < 0) {
        PyErr_SetString(PyExc_ValueError, "exe_fd < 0 needs exe_path");
        goto done;
    }
    if (!(p->argv = to_cstrings(argv, keep, "argv")) || !(p->envp = to_cstrings(envp, keep, "envp")))
        goto done;
    if (p->argv[0] == NULL && !p->warm) {
        PyErr_SetString(PyExc_ValueError, "argv must not be empty");
        goto done;
    }
    if (warm_roots && parse_roots(warm_roots, p, keep) != 0)
        goto done;
    if (p->n_roots > 0 && !p->warm) {
        PyErr_SetString(PyExc_ValueError, "roots are a warm child's (warm_channel)");
        goto done;
    }
    if (!PyArg_ParseTuple(stdio, "iii;stdio must be (in, out, err)", &p->stdio[0], &p->stdio[1], &p->stdio[2]))
        goto done;

    if (parse_mounts(mounts, p, keep) != 0)
        goto done;
    /* A step meant for the spawn's own namespace must never reach the host's:
     * refuse a plan that would rename the host, mount in its namespace or
     * bring its loopback up (a bug in the caller, not a choice made here). */
    if (p->hostname && !(p->clone_flags & CLONE_NEWUTS)) {
        PyErr_SetString(PyExc_ValueError, "hostname needs CLONE_NEWUTS (it would rename the host)");
        goto done;
    }
    if (p->n_mounts > 0 && !(p->clone_flags & CLONE_NEWNS) && p->mntns_fd < 0) {
        PyErr_SetString(PyExc_ValueError,
                        "mounts need CLONE_NEWNS or mntns_fd (they would change the host's mounts)");
        goto done;
    }
    if (p->loopback_up && !(p->clone_flags & CLONE_NEWNET)) {
        PyErr_SetString(PyExc_ValueError, "loopback_up needs CLONE_NEWNET");
        goto done;
    }
    if (p->tty_fd >= 0 && !(p->clone_flags & CLONE_NEWNS) && p->mntns_fd < 0) {
        PyErr_SetString(PyExc_ValueError,
                        "a terminal needs CLONE_NEWNS or mntns_fd (its devpts is the spawn's own)");
        goto done;
    }
    if (p->init && !(p->clone_flags & CLONE_NEWPID)) {
        PyErr_SetString(PyExc_ValueError, "init needs CLONE_NEWPID (it is pid 1 of the spawn)");
        goto done;
    }

    if (parse_cgroup_fds(cgroup_fds, p) != 0 || parse_rlimits(rlimits, p) != 0 ||
        parse_landlock_rules(landlock_rules, p, keep) != 0)
        goto done;

    if (ids != Py_None) {
        unsigned int uid, gid;
        if (!PyArg_ParseTuple(ids, "II;ids must be (uid, gid)", &uid, &gid))
            goto done;
        p->set_ids = 1;
        p->uid = uid;
        p->gid = gid;
    }
    if (filter.len % sizeof(struct sock_filter) != 0 ||
        filter.len / sizeof(struct sock_filter) > BPF_MAXINSNS) {
        PyErr_SetString(PyExc_ValueError, "seccomp_filter is not a sock_filter array");
        goto done;
    }
    p->seccomp.len = (unsigned short)(filter.len / sizeof(struct sock_filter));
    p->seccomp.filter = filter.buf;

    if (!(stack = take_stack()))
        goto done;

    /* The child resets dispositions and unblocks signals before exec. */
    pid_t pid;
    int report = -1;
    if (p->warm) {
        /* Its own memory (it waits): cloned like the init, with a buffer for
         * its request that the parent need not keep. */
        p->warm_buf = mmap(NULL, WARM_BUFFER, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                           -1, 0);
        if (p->warm_buf == MAP_FAILED) {
            p->warm_buf = NULL;
            PyErr_SetFromErrno(PyExc_OSError);
            goto done;
        }
        pid = start_init_child(stack, p);
        munmap(p->warm_buf, WARM_BUFFER);
        p->warm_buf = NULL;
        /* Not waited for: its set-up runs while the caller goes on, and its
         * first record (ready, or the step that failed) comes on the pipe. */
        report = pid >= 0 ? p->report_read : -1;
    } else if (p->init) {
        pid = start_init_child(stack, p);
        if (pid >= 0) {
            Py_BEGIN_ALLOW_THREADS
            pid = wait_init_child(pid, p, &report);
            Py_END_ALLOW_THREADS
        }
    } else {
        Py_BEGIN_ALLOW_THREADS
        pid = run_child(child_main, stack, p->clone_flags, p, 0);
        Py_END_ALLOW_THREADS
    }
    if (p->fail_step != STEP_NONE) {
        raise_setup_error(p);
        goto done;
    }
    result = p->init || p->warm ? Py_BuildValue("(ii)", pid, report) : PyLong_FromLong(pid);
    if (!result && report >= 0)
        close(report);

done:
    stack_give(stack);
    if (p) {
        PyMem_Free(p->argv);
        PyMem_Free(p->envp);
        plan_give(p);
    }
    PyBuffer_Release(&filter);
    Py_XDECREF(keep);
    return result;
}

PyDoc_STRVAR(go_doc,
"go(*, channel_fd, payload, fds) -> None\n\n"
"Give a warm child (made by spawn with warm_channel) its request: `payload`\n"
"(childsetup.pack_request's layout) and `fds` (stdin, stdout, stderr,\n"
"cancel, go[, executable]) on `channel_fd`, without blocking: the channel's\n"
"buffer holds the whole request (OSError EAGAIN if it cannot). What became of\n"
"it comes on its report pipe: with an init, the init's set-up record; without,\n"
"a record if a step failed, else the pipe hangs up at the exec.");

static PyObject *childsetup_go(PyObject *self, PyObject *args, PyObject *kwargs)
{
    (void)self;
    static char *kwlist[] = {"channel_fd", "payload", "fds", NULL};
    int channel = -1;
    Py_buffer payload = {0};
    PyObject *fd_seq = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "$iy*O:go", kwlist, &channel, &payload,
                                     &fd_seq))
        return NULL;
    int fds[WARM_FDS];
    const char *bad = "go needs 5 or 6 fds and a payload that fits";
    Py_ssize_t n = payload.len > WARM_BUFFER ? -1 : parse_fds(fd_seq, fds, 5, WARM_FDS, bad);
    if (n < 0) {
        PyBuffer_Release(&payload);
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_ValueError, bad);
        return NULL;
    }
    int rc = warm_send(channel, payload.buf, (size_t)payload.len, fds, (int)n);
    int err = errno;
    PyBuffer_Release(&payload);
    if (rc != 0) {
        errno = err;
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    Py_RETURN_NONE;
}

PyDoc_STRVAR(mount_namespace_doc,
"mount_namespace(*, mounts[, base_fd, here]) -> fd\n\n"
"Make a new mount namespace and run `mounts` (as spawn() takes them) in it,\n"
"in a short-lived child; return an O_CLOEXEC fd of the namespace, for one\n"
"spawn's mntns_fd. The new namespace is a copy of the caller's, or of\n"
"base_fd's (an environment's, a profile's template: the copy a spawn in it\n"
"would make; its tree clones, `mounts`' keep steps, are made first, in the\n"
"caller's namespace). here (with base_fd): made by the calling thread, no\n"
"child; the process must have no other thread (setns fails: EINVAL), and\n"
"is aborted if it cannot go back to its own namespace.\n"
"Raises SetupError(step, errno) if a step fails.");

static PyObject *childsetup_mount_namespace(PyObject *self, PyObject *args, PyObject *kwargs)
{
    (void)self;
    static char *kwlist[] = {"mounts", "base_fd", "here", NULL};
    PyObject *mounts = NULL;
    int base_fd = -1, here = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|$Oip:mount_namespace", kwlist, &mounts,
                                     &base_fd, &here))
        return NULL;
    if (here && base_fd < 0) {
        PyErr_SetString(PyExc_ValueError, "mount_namespace(here=True) needs a base_fd");
        return NULL;
    }
    if (!mounts) {
        PyErr_SetString(PyExc_TypeError, "mount_namespace() needs mounts");
        return NULL;
    }

    PyObject *result = NULL;
    char *stack = NULL;
    struct plan *p = NULL;
    PyObject *keep = PyList_New(0);
    if (!keep || !(p = take_plan()))
        goto done;
    p->mntns_fd = base_fd;
    p->mntns_copy = base_fd >= 0;
    for (int i = 0; i < MAX_TREES; i++)
        p->trees[i] = -1;
    if (parse_mounts(mounts, p, keep) != 0)
        goto done;
    if (here) {
        /* With the GIL: the process is in the copy until the call returns. */
        mntns_copy_here(p);
    } else {
        if (!(stack = take_stack()))
            goto done;
        Py_BEGIN_ALLOW_THREADS
        mntns_make(p, stack);
        Py_END_ALLOW_THREADS
    }
    if (p->fail_step != STEP_NONE) {
        raise_setup_error(p);
        goto done;
    }
    result = PyLong_FromLong(p->mntns_fd);

done:
    stack_give(stack);
    plan_give(p);
    Py_XDECREF(keep);
    return result;
}


/* An A/B switch of the bench: set `flag` from `arg`; its previous setting. */
static PyObject *set_switch(int *flag, PyObject *arg)
{
    int enabled = PyObject_IsTrue(arg);
    if (enabled < 0)
        return NULL;
    int was = *flag;
    *flag = enabled;
    return PyBool_FromLong(was);
}

PyDoc_STRVAR(use_forker_doc,
"_use_forker(enabled) -> bool\n\n"
"Whether inits are cloned through the forker (forker.c), as by default, or by\n"
"the caller itself (the A/B of the bench); the previous setting.");

static PyObject *childsetup_use_forker(PyObject *self, PyObject *arg)
{
    (void)self;
    return set_switch(&forker_enabled, arg);
}

PyDoc_STRVAR(warm_preclone_doc,
"_warm_preclone(enabled) -> bool\n\n"
"Whether a warm child with an init clones its command's process before the\n"
"request, as by default (init.c, warm.c), or after it; the\n"
"previous setting.");

static PyObject *childsetup_warm_preclone(PyObject *self, PyObject *arg)
{
    (void)self;
    return set_switch(&warm_preclone, arg);
}

PyDoc_STRVAR(preclone_vfork_doc,
"_preclone_vfork(enabled) -> bool\n\n"
"Whether a warm init waits for its command process cloned ahead in a vfork\n"
"wait (uninterruptible: the A/B's old way), or on a futex, as by default\n"
"(init.c, preclone_and_wait); the previous setting.");

static PyObject *childsetup_preclone_vfork(PyObject *self, PyObject *arg)
{
    (void)self;
    return set_switch(&preclone_vfork, arg);
}

PyDoc_STRVAR(init_setsid_doc,
"_init_setsid(enabled) -> bool\n\n"
"Whether an init makes a session of its own (setsid), or only a process\n"
"group, as by default (its command's process makes the spawn's session);\n"
"the A/B of the bench; the previous setting.");

static PyObject *childsetup_init_setsid(PyObject *self, PyObject *arg)
{
    (void)self;
    return set_switch(&init_setsid_enabled, arg);
}

PyDoc_STRVAR(forker_trim_doc,
"_forker_trim(enabled) -> bool\n\n"
"Whether the forker trims its copy of the caller (forker.c: other threads'\n"
"guard pages and reserved arenas, the caller's stack frames, its scratch), as\n"
"by default; the forker is ended and a new one started with the setting\n"
"(the A/B of the bench, outside its timing); the previous setting.");

static PyObject *childsetup_forker_trim(PyObject *self, PyObject *arg)
{
    (void)self;
    PyObject *was = set_switch(&forker_trim, arg);
    if (was && forker_restart() != 0) {
        Py_DECREF(was);
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    return was;
}

static PyMethodDef methods[] = {
    {"_forker_trim", childsetup_forker_trim, METH_O, forker_trim_doc},
    {"_init_setsid", childsetup_init_setsid, METH_O, init_setsid_doc},
    {"_warm_preclone", childsetup_warm_preclone, METH_O, warm_preclone_doc},
    {"_preclone_vfork", childsetup_preclone_vfork, METH_O, preclone_vfork_doc},
    {"_use_forker", childsetup_use_forker, METH_O, use_forker_doc},
    {"spawn", (PyCFunction)(void (*)(void))childsetup_spawn, METH_VARARGS | METH_KEYWORDS, spawn_doc},
    {"go", (PyCFunction)(void (*)(void))childsetup_go, METH_VARARGS | METH_KEYWORDS, go_doc},
    {"mount_namespace", (PyCFunction)(void (*)(void))childsetup_mount_namespace,
     METH_VARARGS | METH_KEYWORDS, mount_namespace_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "hostcapd._childsetup",
    "The child's set-up between clone and exec (see spawn).", -1, methods,
    NULL, NULL, NULL, NULL,
};


PyMODINIT_FUNC PyInit__childsetup(void)
{
    read_arg_area();
    PyObject *m = PyModule_Create(&module);
    if (!m)
        return NULL;
    SetupError = PyErr_NewExceptionWithDoc(
        "hostcapd._childsetup.SetupError",
        "A set-up step failed in the child: args are (step, errno).", PyExc_Exception, NULL);
    if (!SetupError || PyModule_AddObject(m, "SetupError", SetupError) < 0) {
        Py_XDECREF(SetupError);
        Py_DECREF(m);
        return NULL;
    }
    Py_INCREF(SetupError);
    if (PyModule_AddIntConstant(m, "WARM_BUFFER", WARM_BUFFER) < 0 ||
        PyModule_AddIntConstant(m, "WARM_WORDS", WARM_WORDS) < 0 ||
        PyModule_AddIntConstant(m, "WARM_MAGIC", WARM_MAGIC) < 0 ||
        PyModule_AddIntConstant(m, "INIT_SETUP_MAGIC", INIT_SETUP_MAGIC) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    /* The step names by number, for records read in Python (a warm child's). */
    PyObject *steps = PyTuple_New(N_STEPS);
    for (int i = 0; steps && i < N_STEPS; i++) {
        PyObject *name = PyUnicode_FromString(step_names[i]);
        if (!name) {
            Py_CLEAR(steps);
            break;
        }
        PyTuple_SET_ITEM(steps, i, name);
    }
    if (!steps || PyModule_AddObject(m, "STEPS", steps) < 0) {
        Py_XDECREF(steps);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
