/* A job that computes, writes a checkpoint every few seconds into its burst buffer, and
 * drains each one to its own directory while it computes on (libdacstage, dacstage.h).
 *
 *   checkpoint DEST COUNT MIB SECONDS [ring|none]
 *
 * Writes COUNT checkpoints of MIB MiB to $DW_JOB_STRIPED/ckpt.<i>, "computing" (sleeping)
 * SECONDS between two; each is staged out to DEST/ckpt.<i> at once, in the background, while
 * the next is computed. With `ring`, each is instead staged at the job's end, revocable, to
 * DEST/ckpt: only the newest is drained when the job ends. With `none`, nothing is staged:
 * the same job without drains, to compare (bench/injob_staging.py). Exits 0 once every
 * immediate stage is done; 1, naming the failure, otherwise. */
#define _DEFAULT_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dacstage.h"

static int check(int rc, const char *what)
{
    if (rc != DACSTAGE_OK)
        fprintf(stderr, "checkpoint: %s: %s: %s\n", what, dacstage_strerror(rc), dacstage_errmsg());
    return rc;
}

int main(int argc, char **argv)
{
    const char *buffer = getenv("DW_JOB_STRIPED");
    if (argc < 5 || !buffer) {
        fprintf(stderr, "usage: checkpoint DEST COUNT MIB SECONDS [ring|none] (in a job with a "
                        "buffer)\n");
        return 2;
    }
    const char *dest = argv[1];
    int count = atoi(argv[2]), ring = argc > 5 && !strcmp(argv[5], "ring");
    int none = argc > 5 && !strcmp(argv[5], "none");
    size_t size = (size_t)atol(argv[3]) << 20;
    double seconds = atof(argv[4]);
    char *data = calloc(1, 1 << 20); /* zeroed: a checkpoint's bytes depend on i alone */
    if (!data)
        return 1;
    dacstage_init(NULL);
    for (int i = 1; i <= count; i++) {
        usleep((useconds_t)(seconds * 1e6)); /* compute */
        char src[4096], dst[4096];
        snprintf(src, sizeof src, "%s/ckpt.%d", buffer, i);
        FILE *f = fopen(src, "wb");
        if (!f) {
            perror(src);
            return 1;
        }
        for (size_t done = 0; done < size; done += 1 << 20) {
            for (size_t j = 0; j < 1 << 20; j += 4096)
                snprintf(data + j, 4096, "checkpoint %d, offset %zu\n", i, done + j);
            fwrite(data, 1, 1 << 20, f);
        }
        if (fclose(f)) {
            perror(src);
            return 1;
        }
        int id = 0;
        if (none) {
            printf("checkpoint %d: written\n", i);
            fflush(stdout);
            continue;
        }
        if (ring) {
            snprintf(dst, sizeof dst, "%s/ckpt", dest);
            if (check(dacstage_out(src, dst, DACSTAGE_AT_JOB_END | DACSTAGE_REVOCABLE, &id), src))
                return 1;
        } else {
            snprintf(dst, sizeof dst, "%s/ckpt.%d", dest, i);
            if (check(dacstage_out(src, dst, DACSTAGE_NOW, &id), src))
                return 1;
        }
        printf("checkpoint %d: stage %d\n", i, id);
        fflush(stdout);
    }
    if (!ring && !none) {
        dacstage_info info;
        int rc = dacstage_wait(0, 0, &info);
        if (check(rc, "wait"))
            return 1;
        printf("drained: all %d checkpoints (the first, stage %d: %lld bytes)\n", count, info.id,
               info.bytes_done);
    }
    free(data);
    return 0;
}
