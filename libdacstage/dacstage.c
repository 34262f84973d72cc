/* libdacstage: each call runs `dacctl stage ... --json` and reads its answer (dacstage.h).
 *
 * Why dacctl and not munge and a socket here: the request must carry a munge credential
 * (libmunge is not on every node, its headers rarely), the service's address is in dac.yaml
 * (YAML), and the answer is dac's JSON; dacctl already does all three, so this library
 * stays a few hundred lines with no dependency but libc, and can never disagree with dacctl
 * about the protocol. The cost is one process per call (docs/performance.md has the figure).
 */
#define _GNU_SOURCE
#include "dacstage.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

static char dacctl_path[4096];
static char errmsg[1024];

static int fail(int code, const char *fmt, const char *what)
{
    snprintf(errmsg, sizeof errmsg, fmt, what ? what : "");
    return code;
}

int dacstage_init(const char *dacctl)
{
    const char *d = dacctl ? dacctl : getenv("DACCTL");
    snprintf(dacctl_path, sizeof dacctl_path, "%s", d && *d ? d : "dacctl");
    errmsg[0] = 0;
    return DACSTAGE_OK;
}

/* -- running dacctl ------------------------------------------------------------------------- */

struct out {
    char *data;
    size_t len, cap;
};

static int append(struct out *o, const char *buf, size_t n)
{
    if (o->len + n + 1 > o->cap) {
        size_t cap = (o->cap ? o->cap * 2 : 4096) + n;
        char *p = realloc(o->data, cap);
        if (!p)
            return -1;
        o->data = p;
        o->cap = cap;
    }
    memcpy(o->data + o->len, buf, n);
    o->len += n;
    o->data[o->len] = 0;
    return 0;
}

/* argv run to its end; stdout and stderr kept (NUL-terminated); its exit status, or -1 */
static int run(char *const argv[], struct out *out, struct out *err)
{
    int po[2], pe[2], status = -1;
    pid_t pid;
    posix_spawn_file_actions_t fa;

    if (!dacctl_path[0])
        dacstage_init(NULL);
    if (pipe2(po, O_CLOEXEC) || pipe2(pe, O_CLOEXEC))
        return -1;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, po[1], 1);
    posix_spawn_file_actions_adddup2(&fa, pe[1], 2);
    if (posix_spawnp(&pid, argv[0], &fa, NULL, argv, environ) != 0) {
        posix_spawn_file_actions_destroy(&fa);
        close(po[0]), close(po[1]), close(pe[0]), close(pe[1]);
        return -1;
    }
    posix_spawn_file_actions_destroy(&fa);
    close(po[1]);
    close(pe[1]);
    struct pollfd fds[2] = {{po[0], POLLIN, 0}, {pe[0], POLLIN, 0}};
    int open_ = 2;
    while (open_) {
        if (poll(fds, 2, -1) < 0) {
            if (errno == EINTR)
                continue;
            break;
        }
        for (int i = 0; i < 2; i++) {
            if (fds[i].fd < 0 || !fds[i].revents)
                continue;
            char buf[8192];
            ssize_t n = read(fds[i].fd, buf, sizeof buf);
            if (n > 0) {
                append(i ? err : out, buf, (size_t)n);
            } else if (n == 0 || errno != EINTR) {
                close(fds[i].fd);
                fds[i].fd = -1;
                open_--;
            }
        }
    }
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/* dacctl's exit and stderr as a return code and errmsg */
static int outcome(int rc, struct out *err)
{
    static const char *marks[] = {"user error: ", "admin error: ", "internal error: "};
    if (rc == 0) {
        errmsg[0] = 0;
        return DACSTAGE_OK;
    }
    if (rc < 0)
        return fail(DACSTAGE_ESYS, "could not run %.900s", dacctl_path);
    const char *line = err->data ? err->data : "";
    for (size_t i = 0; i < 3; i++) {
        const char *m = strstr(line, marks[i]);
        if (m) {
            line = m + strlen(marks[i]);
            break;
        }
    }
    snprintf(errmsg, sizeof errmsg, "%.*s", (int)strcspn(line, "\n"), line);
    if (!errmsg[0])
        snprintf(errmsg, sizeof errmsg, "%.900s exited %d", dacctl_path, rc);
    return rc <= 3 ? rc : DACSTAGE_ESYS;
}

/* -- reading dac's JSON (flat objects: numbers, strings, null) ------------------------------- */

/* the value after "key": in [p, end), or NULL */
static const char *value_of(const char *p, const char *end, const char *key)
{
    char want[64];
    int n = snprintf(want, sizeof want, "\"%s\":", key);
    for (const char *q = p; q && q + n <= end; q++) {
        q = memmem(q, (size_t)(end - q), want, (size_t)n);
        if (!q)
            return NULL;
        const char *v = q + n;
        while (v < end && (*v == ' ' || *v == '\n'))
            v++;
        return v;
    }
    return NULL;
}

static long long number(const char *p, const char *end, const char *key, long long none)
{
    const char *v = value_of(p, end, key);
    return v && (*v == '-' || (*v >= '0' && *v <= '9')) ? strtoll(v, NULL, 10) : none;
}

static void string(const char *p, const char *end, const char *key, char *dst, size_t size)
{
    const char *v = value_of(p, end, key);
    size_t n = 0;
    dst[0] = 0;
    if (!v || *v != '"')
        return;
    for (v++; v < end && *v != '"' && n + 1 < size; v++) {
        char c = *v;
        if (c == '\\' && v + 1 < end) {
            c = *++v;
            if (c == 'n' || c == 't')
                c = ' ';
            else if (c == 'u') {
                v += 4 < end - v ? 4 : end - v - 1;
                c = '?';
            }
        }
        dst[n++] = c;
    }
    dst[n] = 0;
}

static void fill(const char *p, const char *end, dacstage_info *info)
{
    const char *eta = value_of(p, end, "eta");
    info->id = (int)number(p, end, "id", 0);
    string(p, end, "state", info->state, sizeof info->state);
    info->bytes_done = number(p, end, "bytes_done", 0);
    info->bytes_total = number(p, end, "bytes_total", 0);
    info->files_done = number(p, end, "files_done", 0);
    info->files_total = number(p, end, "files_total", 0);
    info->rate = number(p, end, "rate", 0);
    info->eta = eta && *eta != 'n' ? strtod(eta, NULL) : -1;
    string(p, end, "error", info->error, sizeof info->error);
}

/* the next top-level object of a JSON list (or the one object) at or after *p */
static int next_object(const char **p, const char *end, const char **start, const char **stop)
{
    int depth = 0, in_string = 0;
    for (const char *q = *p; q < end; q++) {
        if (in_string) {
            if (*q == '\\')
                q++;
            else if (*q == '"')
                in_string = 0;
        } else if (*q == '"') {
            in_string = 1;
        } else if (*q == '{') {
            if (depth++ == 0)
                *start = q;
        } else if (*q == '}' && depth > 0 && --depth == 0) {
            *stop = q + 1;
            *p = q + 1;
            return 1;
        }
    }
    return 0;
}

static int final(const char *state)
{
    return !strcmp(state, "done") || !strcmp(state, "failed") || !strcmp(state, "cancelled") ||
           !strcmp(state, "revoked");
}

/* -- the calls ----------------------------------------------------------------------------- */

static int start(const char *direction, const char *src, const char *dst, int flags, int *id)
{
    if (!src || !dst || (flags & ~(DACSTAGE_AT_JOB_END | DACSTAGE_REVOCABLE | DACSTAGE_DIRECTORY)))
        return fail(DACSTAGE_EINVAL, "dacstage_%s: a source, a destination and known flags", direction);
    if (!dacctl_path[0])
        dacstage_init(NULL);
    char *argv[12];
    int n = 0;
    argv[n++] = dacctl_path, argv[n++] = "stage", argv[n++] = (char *)direction;
    argv[n++] = (char *)src, argv[n++] = (char *)dst, argv[n++] = "--json";
    if (flags & DACSTAGE_AT_JOB_END)
        argv[n++] = "--at-job-end";
    if (flags & DACSTAGE_REVOCABLE)
        argv[n++] = "--revocable";
    if (flags & DACSTAGE_DIRECTORY)
        argv[n++] = "--directory";
    argv[n] = NULL;
    struct out out = {0}, err = {0};
    int rc = outcome(run(argv, &out, &err), &err);
    if (rc == DACSTAGE_OK && id) {
        *id = out.data ? (int)number(out.data, out.data + out.len, "id", 0) : 0;
        if (*id <= 0)
            rc = fail(DACSTAGE_ESYS, "%.900s answered no stage id", dacctl_path);
    }
    free(out.data), free(err.data);
    return rc;
}

int dacstage_in(const char *src, const char *dst, int flags, int *id)
{
    return start("in", src, dst, flags, id);
}

int dacstage_out(const char *src, const char *dst, int flags, int *id)
{
    return start("out", src, dst, flags, id);
}

static int by_id(const char *what, int id, dacstage_info *info)
{
    char ids[16];
    if (id <= 0)
        return fail(DACSTAGE_EINVAL, "dacstage_%s: a stage id", what);
    if (!dacctl_path[0])
        dacstage_init(NULL);
    snprintf(ids, sizeof ids, "%d", id);
    char *argv[] = {dacctl_path, "stage", (char *)what, ids, "--json", NULL};
    struct out out = {0}, err = {0};
    int rc = outcome(run(argv, &out, &err), &err);
    if (rc == DACSTAGE_OK && info) {
        memset(info, 0, sizeof *info);
        if (out.data)
            fill(out.data, out.data + out.len, info);
    }
    free(out.data), free(err.data);
    return rc;
}

int dacstage_query(int id, dacstage_info *info)
{
    return by_id("status", id, info);
}

int dacstage_cancel(int id)
{
    return by_id("cancel", id, NULL);
}

int dacstage_wait(int id, int timeout, dacstage_info *info)
{
    char ids[16], secs[16] = "?";
    int n = 0;
    if (!dacctl_path[0])
        dacstage_init(NULL);
    char *argv[10];
    argv[n++] = dacctl_path, argv[n++] = "stage", argv[n++] = "wait", argv[n++] = "--json";
    if (id > 0) {
        snprintf(ids, sizeof ids, "%d", id);
        argv[n++] = ids;
    } else {
        argv[n++] = "--all";
    }
    if (timeout > 0) {
        snprintf(secs, sizeof secs, "%d", timeout);
        argv[n++] = "--timeout", argv[n++] = secs;
    }
    argv[n] = NULL;
    struct out out = {0}, err = {0};
    int rc = outcome(run(argv, &out, &err), &err);
    if (rc == DACSTAGE_OK || rc == DACSTAGE_EUSER) {
        /* the stages were printed even when one failed or time ran out: say which */
        const char *p = out.data, *end = out.data + out.len, *a, *b;
        dacstage_info one;
        int ended = 1, failed = 0, seen = 0;
        while (p && next_object(&p, end, &a, &b)) {
            fill(a, b, &one);
            int f = !strcmp(one.state, "failed");
            if (info && (!seen || (f && !failed)))
                *info = one; /* the first stage, or the first that failed */
            seen++;
            ended &= final(one.state);
            failed |= f;
        }
        if (seen && failed)
            rc = DACSTAGE_EFAILED;
        else if (seen && !ended)
            rc = fail(DACSTAGE_ETIMEOUT, "stage wait: not all ended within %s s", secs);
    }
    free(out.data), free(err.data);
    return rc;
}

const char *dacstage_errmsg(void)
{
    return errmsg;
}

const char *dacstage_strerror(int code)
{
    switch (code) {
    case DACSTAGE_OK: return "success";
    case DACSTAGE_EUSER: return "refused (a path, a job not yours, a cap)";
    case DACSTAGE_EADMIN: return "dac's user service or munged unreachable";
    case DACSTAGE_EINTERNAL: return "internal error in dac";
    case DACSTAGE_ESYS: return "dacctl could not be run or answered nothing readable";
    case DACSTAGE_EFAILED: return "the stage failed";
    case DACSTAGE_ETIMEOUT: return "timed out";
    case DACSTAGE_EINVAL: return "invalid argument";
    default: return "unknown error";
    }
}
