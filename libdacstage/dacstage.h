/* libdacstage: stages from inside a running job, from C or Fortran (issue 36).
 *
 * A job running on a node with a dac burst buffer asks for copies between its buffer
 * ($DW_JOB_STRIPED, $DW_JOB_PRIVATE, $DW_PERSISTENT_STRIPED_<name>) and its user's own paths,
 * and goes on computing while they run: DataWarp's libdatawarp (dw_stage_file_out, ...)
 * and Rabbit's copy-offload, for dac. Each call runs `dacctl stage ... --json` (the user's
 * own dacctl, which asks dac's user service with a munge credential) and reads its answer:
 * one process per call, a few tens of milliseconds, no credential or address kept here.
 * docs/users.md has the three forms (dacctl, Python, C) side by side.
 *
 * Not thread-safe: dacstage_errmsg() is the calling process's last failure.
 * Fortran: bind(C) interfaces to these functions (ints and C strings only).
 */
#ifndef DACSTAGE_H
#define DACSTAGE_H

#ifdef __cplusplus
extern "C" {
#endif

/* flags of dacstage_in / dacstage_out (or-ed) */
#define DACSTAGE_NOW 0           /* at once, in the background (the default) */
#define DACSTAGE_AT_JOB_END 1    /* with the job's #DW stage_out lines, before teardown */
#define DACSTAGE_REVOCABLE 2     /* with AT_JOB_END: a later one to the same destination replaces it */
#define DACSTAGE_DIRECTORY 4     /* the source is a directory (default: a file) */

/* return codes: 0, or one of these; dacstage_errmsg() has the line */
enum {
    DACSTAGE_OK = 0,
    DACSTAGE_EUSER = 1,     /* refused: a path outside the job's buffer, not your job, a cap */
    DACSTAGE_EADMIN = 2,    /* dac's user service or munged unreachable: an admin must act */
    DACSTAGE_EINTERNAL = 3, /* a bug in dac: its log says more */
    DACSTAGE_ESYS = 4,      /* dacctl could not be run, or answered nothing readable */
    DACSTAGE_EFAILED = 5,   /* the stage ended failed (dacstage_wait) */
    DACSTAGE_ETIMEOUT = 6,  /* dacstage_wait's timeout passed first */
    DACSTAGE_EINVAL = 7     /* a bad argument (NULL path, flags) */
};

/* what dacstage_query and dacstage_wait fill in */
typedef struct {
    int id;
    char state[16];  /* queued, running, done, failed, cancelled, revoked */
    long long bytes_done, bytes_total, files_done, files_total;
    long long rate;  /* bytes per second */
    double eta;      /* seconds left, -1 when unknown */
    char error[512]; /* why it failed, "" otherwise */
} dacstage_info;

/* `dacctl`: the dacctl to run; NULL: $DACCTL, else `dacctl` on PATH. Optional. */
int dacstage_init(const char *dacctl);

/* copy `src` (yours) into the job's buffer at `dst`; *id (may be NULL) the new stage's id */
int dacstage_in(const char *src, const char *dst, int flags, int *id);
/* copy `src` (in the job's buffer) to `dst` (yours) */
int dacstage_out(const char *src, const char *dst, int flags, int *id);
/* the stage `id` as it is now */
int dacstage_query(int id, dacstage_info *info);
/* until stage `id` (0: every stage of the job) has ended, at most `timeout` seconds (<= 0:
 * no limit); DACSTAGE_EFAILED when it (or one) failed; `info` (may be NULL) the stage, or the
 * first that failed */
int dacstage_wait(int id, int timeout, dacstage_info *info);
/* stop stage `id`: killed if running, never run if queued */
int dacstage_cancel(int id);

/* the last failure's one line ("" after a success) */
const char *dacstage_errmsg(void);
/* what a return code means */
const char *dacstage_strerror(int code);

#ifdef __cplusplus
}
#endif
#endif
