// SPDX-License-Identifier: BSD-3-Clause
/*
 * unit_seccomp.c - runs a program under the system-call restrictions a systemd unit asks
 * for, where no systemd is there to apply them (scripts/unit_sandbox.py, on a GPU machine
 * whose PID 1 is not systemd). It installs one seccomp filter and execs the program:
 *
 *   unit_seccomp [--errno N] [--allow-file F] [--af-unix] [--restrict-namespaces]
 *                [--restrict-realtime] [--restrict-suid-sgid] [--lock-personality]
 *                [--memory-deny-write-execute] -- PROGRAM [ARG...]
 *
 *   --allow-file F   the system calls allowed, one name a line (SystemCallFilter= after
 *                    unit_sandbox.py expanded its @groups and removed its ~ entries);
 *                    every other call fails with errno N (SystemCallErrorNumber=, default
 *                    EPERM). Names this kernel or libseccomp does not know are skipped.
 *   --af-unix        socket()/socketpair() of any family but AF_UNIX fail with
 *                    EAFNOSUPPORT (RestrictAddressFamilies=AF_UNIX)
 *   --restrict-namespaces  clone/unshare with a namespace flag and setns fail with EPERM,
 *                    clone3 with ENOSYS so that the C library falls back to clone, whose
 *                    flags a filter can read (RestrictNamespaces=yes)
 *   --restrict-realtime    sched_setscheduler to a policy other than OTHER, BATCH or IDLE,
 *                    and every sched_setattr, fail with EPERM (RestrictRealtime=yes)
 *   --restrict-suid-sgid   chmod/fchmod/fchmodat/fchmodat2 setting S_ISUID or S_ISGID fail
 *                    with EPERM (RestrictSUIDSGID=yes; systemd also covers creating such
 *                    files through open's mode, which this does not)
 *   --lock-personality     personality() other than PER_LINUX or the query fails with EPERM
 *                    (LockPersonality=yes)
 *   --memory-deny-write-execute  mmap() asking for PROT_WRITE and PROT_EXEC together,
 *                    mprotect()/pkey_mprotect() asking for PROT_EXEC and shmat() with
 *                    SHM_EXEC fail with EPERM (MemoryDenyWriteExecute=yes)
 *
 * Calls of a foreign architecture kill the process (SystemCallArchitectures=native). Each
 * rule is at least as strict as systemd's, so a program that runs under this runs under
 * the unit. The filter is installed with no_new_privs set, as NoNewPrivileges=yes does.
 * Exit status: the program's, or 127 when this could not set up or exec it.
 */
#include <errno.h>
#include <sched.h>
#include <stddef.h>
#include <seccomp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/shm.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#define NS_FLAGS                                                                              \
    (CLONE_NEWNS | CLONE_NEWCGROUP | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWUSER |          \
     CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWTIME)
#ifndef CLONE_NEWTIME
#define CLONE_NEWTIME 0x00000080
#endif
#define SCHED_RESET_ON_FORK_FLAG 0x40000000
#define PERSONALITY_QUERY 0xffffffffu

struct opts {
    int err;
    const char *allow_file;
    int af_unix, namespaces, realtime, suid, personality, mdwe;
};

/* The calls an option takes over: where it is on, they are allowed only where the list
 * allows them, and then only under the option's conditions (conditions() below). */
static const struct {
    const char *name;
    size_t option; /* offsetof the struct opts flag */
} special[] = {
    {"socket", offsetof(struct opts, af_unix)},
    {"socketpair", offsetof(struct opts, af_unix)},
    {"clone", offsetof(struct opts, namespaces)},
    {"clone3", offsetof(struct opts, namespaces)},
    {"unshare", offsetof(struct opts, namespaces)},
    {"setns", offsetof(struct opts, namespaces)},
    {"sched_setscheduler", offsetof(struct opts, realtime)},
    {"sched_setattr", offsetof(struct opts, realtime)},
    {"chmod", offsetof(struct opts, suid)},
    {"fchmod", offsetof(struct opts, suid)},
    {"fchmodat", offsetof(struct opts, suid)},
    {"fchmodat2", offsetof(struct opts, suid)},
    {"personality", offsetof(struct opts, personality)},
    {"mmap", offsetof(struct opts, mdwe)},
    {"mprotect", offsetof(struct opts, mdwe)},
    {"pkey_mprotect", offsetof(struct opts, mdwe)},
    {"shmat", offsetof(struct opts, mdwe)},
};

/* The flag options and the struct opts flag each sets. */
static const struct {
    const char *arg;
    size_t option;
} flags[] = {
    {"--af-unix", offsetof(struct opts, af_unix)},
    {"--restrict-namespaces", offsetof(struct opts, namespaces)},
    {"--restrict-realtime", offsetof(struct opts, realtime)},
    {"--restrict-suid-sgid", offsetof(struct opts, suid)},
    {"--lock-personality", offsetof(struct opts, personality)},
    {"--memory-deny-write-execute", offsetof(struct opts, mdwe)},
};

/* Sets the flag named by arg; 0 if arg names none. */
static int set_flag(struct opts *o, const char *arg)
{
    for (size_t i = 0; i < sizeof flags / sizeof flags[0]; i++)
        if (strcmp(arg, flags[i].arg) == 0) {
            *(int *)((char *)o + flags[i].option) = 1;
            return 1;
        }
    return 0;
}

static int is_special(const struct opts *o, const char *name)
{
    for (size_t i = 0; i < sizeof special / sizeof special[0]; i++)
        if (strcmp(name, special[i].name) == 0)
            return *(const int *)((const char *)o + special[i].option);
    return 0;
}

static int listed(char *const *names, size_t n, const char *name)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(names[i], name) == 0)
            return 1;
    return 0;
}

/* A rule on a call that this libseccomp or architecture may not know: skipped then. */
static int rule(scmp_filter_ctx ctx, uint32_t action, const char *name, unsigned n,
                const struct scmp_arg_cmp *cmp)
{
    int nr = seccomp_syscall_resolve_name(name);
    if (nr == __NR_SCMP_ERROR)
        return 0;
    int rc = seccomp_rule_add_array(ctx, action, nr, n, cmp);
    if (rc < 0)
        fprintf(stderr, "unit_seccomp: rule on %s: %s\n", name, strerror(-rc));
    return rc;
}

/* The conditional rules of the options, for the calls the list allows. Calls an option
 * takes over that get no rule here (setns, sched_setattr, a clone3 not listed) fail with
 * the filter's default errno. */
static int conditions(scmp_filter_ctx ctx, const struct opts *o, char *const *allowed, size_t n)
{
#define ALLOWED(name) listed(allowed, n, name)
    int rc = 0;
    if (o->af_unix) {
        static const char *const calls[] = {"socket", "socketpair"};
        for (int i = 0; i < 2 && rc == 0; i++) {
            if (!ALLOWED(calls[i]))
                continue;
            struct scmp_arg_cmp unix_only = SCMP_A0(SCMP_CMP_EQ, AF_UNIX);
            struct scmp_arg_cmp other = SCMP_A0(SCMP_CMP_NE, AF_UNIX);
            rc = rule(ctx, SCMP_ACT_ALLOW, calls[i], 1, &unix_only);
            if (rc == 0)
                rc = rule(ctx, SCMP_ACT_ERRNO(EAFNOSUPPORT), calls[i], 1, &other);
        }
    }
    if (o->namespaces && rc == 0) {
        struct scmp_arg_cmp no_ns = SCMP_A0(SCMP_CMP_MASKED_EQ, NS_FLAGS, 0);
        if (ALLOWED("clone"))
            rc = rule(ctx, SCMP_ACT_ALLOW, "clone", 1, &no_ns);
        if (ALLOWED("unshare") && rc == 0)
            rc = rule(ctx, SCMP_ACT_ALLOW, "unshare", 1, &no_ns);
        if (ALLOWED("clone3") && rc == 0)
            rc = rule(ctx, SCMP_ACT_ERRNO(ENOSYS), "clone3", 0, NULL);
    }
    if (o->realtime && rc == 0 && ALLOWED("sched_setscheduler")) {
        static const int ok[] = {SCHED_OTHER, SCHED_BATCH, SCHED_IDLE};
        for (int i = 0; i < 3 && rc == 0; i++) {
            struct scmp_arg_cmp policy =
                SCMP_A1(SCMP_CMP_MASKED_EQ, ~(uint64_t)SCHED_RESET_ON_FORK_FLAG, (uint64_t)ok[i]);
            rc = rule(ctx, SCMP_ACT_ALLOW, "sched_setscheduler", 1, &policy);
        }
    }
    if (o->suid && rc == 0) {
        static const char *const calls[] = {"chmod", "fchmod", "fchmodat", "fchmodat2"};
        static const int mode_arg[] = {1, 1, 2, 2};
        for (int i = 0; i < 4 && rc == 0; i++) {
            if (!ALLOWED(calls[i]))
                continue;
            struct scmp_arg_cmp plain = {.arg = (unsigned)mode_arg[i], .op = SCMP_CMP_MASKED_EQ,
                                         .datum_a = S_ISUID | S_ISGID, .datum_b = 0};
            rc = rule(ctx, SCMP_ACT_ALLOW, calls[i], 1, &plain);
        }
    }
    if (o->personality && rc == 0 && ALLOWED("personality")) {
        struct scmp_arg_cmp linux_ = SCMP_A0(SCMP_CMP_EQ, 0);
        struct scmp_arg_cmp query = SCMP_A0(SCMP_CMP_EQ, PERSONALITY_QUERY);
        rc = rule(ctx, SCMP_ACT_ALLOW, "personality", 1, &linux_);
        if (rc == 0)
            rc = rule(ctx, SCMP_ACT_ALLOW, "personality", 1, &query);
    }
    if (o->mdwe && rc == 0) {
        /* allowed where (arg & mask) is one of ok[]: mmap without PROT_WRITE and PROT_EXEC
         * together, the mprotects without PROT_EXEC, shmat without SHM_EXEC */
        static const struct {
            const char *name;
            unsigned arg;
            uint64_t mask, ok[3];
            int n_ok;
        } calls[] = {
            {"mmap", 2, PROT_WRITE | PROT_EXEC, {0, PROT_WRITE, PROT_EXEC}, 3},
            {"mprotect", 2, PROT_EXEC, {0}, 1},
            {"pkey_mprotect", 2, PROT_EXEC, {0}, 1},
            {"shmat", 2, SHM_EXEC, {0}, 1},
        };
        for (int i = 0; i < 4 && rc == 0; i++)
            for (int k = 0; k < calls[i].n_ok && rc == 0 && ALLOWED(calls[i].name); k++) {
                struct scmp_arg_cmp ok = {.arg = calls[i].arg, .op = SCMP_CMP_MASKED_EQ,
                                          .datum_a = calls[i].mask, .datum_b = calls[i].ok[k]};
                rc = rule(ctx, SCMP_ACT_ALLOW, calls[i].name, 1, &ok);
            }
    }
    return rc;
#undef ALLOWED
}

/* Reads the list: one name a line; blank lines and '#' comments skipped. */
static int read_list(const char *path, char ***ret_names, size_t *ret_n)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return -errno;
    char **names = NULL;
    size_t n = 0, cap = 0;
    char line[256];
    int rc = 0;
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, " \t\r\n#")] = '\0';
        if (!line[0])
            continue;
        if (n == cap) {
            cap = cap ? 2 * cap : 512;
            char **grown = realloc(names, cap * sizeof *names);
            if (!grown) {
                rc = -ENOMEM;
                break;
            }
            names = grown;
        }
        if (!(names[n] = strdup(line))) {
            rc = -ENOMEM;
            break;
        }
        n++;
    }
    fclose(f);
    if (rc < 0) {
        while (n)
            free(names[--n]);
        free(names);
        return rc;
    }
    *ret_names = names;
    *ret_n = n;
    return 0;
}

static int build(const struct opts *o, scmp_filter_ctx *ret_ctx)
{
    char **names = NULL;
    size_t n = 0;
    int rc = 0;
    if ((rc = read_list(o->allow_file, &names, &n)) < 0) {
        fprintf(stderr, "unit_seccomp: %s: %s\n", o->allow_file, strerror(-rc));
        return rc;
    }
    scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ERRNO((uint32_t)o->err));
    if (!ctx) {
        rc = -ENOMEM;
        goto free_names;
    }
    if ((rc = seccomp_attr_set(ctx, SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_KILL_PROCESS)) < 0)
        goto free_ctx;
    for (size_t i = 0; i < n && rc == 0; i++)
        if (!is_special(o, names[i]))
            rc = rule(ctx, SCMP_ACT_ALLOW, names[i], 0, NULL);
    if (rc == 0)
        rc = conditions(ctx, o, names, n);
    if (rc == 0) {
        *ret_ctx = ctx;
        ctx = NULL;
    }
free_ctx:
    if (ctx)
        seccomp_release(ctx);
free_names:
    while (n)
        free(names[--n]);
    free(names);
    return rc;
}

static void usage(FILE *f)
{
    fprintf(f, "usage: unit_seccomp [--errno N] --allow-file F [--af-unix] [--restrict-namespaces]\n"
               "                    [--restrict-realtime] [--restrict-suid-sgid] [--lock-personality]\n"
               "                    [--memory-deny-write-execute] -- PROGRAM [ARG...]\n"
               "Runs PROGRAM under the seccomp filter of a systemd unit's system-call\n"
               "directives (tests/unit_seccomp.c says which rule stands for which).\n");
}

int main(int argc, char **argv)
{
    struct opts o = {.err = EPERM};
    int i = 1;
    for (; i < argc && strcmp(argv[i], "--") != 0; i++) {
        if (strcmp(argv[i], "--errno") == 0 && i + 1 < argc)
            o.err = atoi(argv[++i]);
        else if (strcmp(argv[i], "--allow-file") == 0 && i + 1 < argc)
            o.allow_file = argv[++i];
        else if (set_flag(&o, argv[i]))
            continue;
        else if (strcmp(argv[i], "--help") == 0) {
            usage(stdout);
            return 0;
        } else {
            usage(stderr);
            return 2;
        }
    }
    if (i + 1 >= argc || !o.allow_file || o.err < 1 || o.err > 4095) {
        usage(stderr);
        return 2;
    }
    scmp_filter_ctx ctx = NULL;
    int rc = build(&o, &ctx);
    if (rc < 0)
        return 127;
    rc = seccomp_load(ctx);
    seccomp_release(ctx);
    if (rc < 0) {
        fprintf(stderr, "unit_seccomp: loading the filter: %s\n", strerror(-rc));
        return 127;
    }
    execvp(argv[i + 1], argv + i + 1);
    fprintf(stderr, "unit_seccomp: %s: %s\n", argv[i + 1], strerror(errno));
    return 127;
}
