#include "kernels/sched/sched.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
/* dump: kind mask seqlen heads w -> per job taken (dispatch index j): bh stages; per stage: n steps m rank ... */
int main(int argc, char **argv)
{
    if (argc < 6) return 2;
    int kind = sched_kind_parse(argv[1]);
    int mask = sched_mask_parse(argv[2]);
    int L = atoi(argv[3]), heads = atoi(argv[4]), w = atoi(argv[5]);
    struct sched_shape sh = {0};
    sh.batch = 1; sh.heads = heads; sh.seqlen_q = sh.seqlen_k = L; sh.block_m = 64; sh.block_n = 128;
    sh.mask = mask;
    struct sched s;
    int rc = sched_init(&s, kind, &sh, w);
    if (rc) { fprintf(stderr, "init %d\n", rc); return 1; }
    printf("%d %d %d\n", s.jobs, s.m_tiles, s.bh);
    for (int j = 0; j < s.jobs; j++) {
        struct sched_job J = sched_job_taken(&s, j);
        int st = sched_job_stages(&s, J.k);
        printf("J %d %d %d %d\n", J.bh, st, sched_wait_end(&s, j), j);
        for (int g = 0; g < st; g++) {
            int n = sched_job_unit(&s, J.k, g), steps = sched_unit_steps(&s, n);
            printf("U %d %d", n, steps);
            for (int k = 0; k < steps; k++) {
                int m = sched_visit(&s, &J, g, k);
                printf(" %d %d", m, sched_rank(&s, &J, g, m));
            }
            printf("\n");
        }
    }
    return 0;
}
