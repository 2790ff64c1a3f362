// SPDX-License-Identifier: BSD-3-Clause
/*
 * install_client.c - a program built against an installed libdash with nothing but
 * `pkg-config --cflags --libs dash` (tests/install_test.sh): it includes <dash.h>, connects
 * to the dashd given on its command line, runs a causal forward on fresh random inputs in
 * shared memory with the outputs poisoned first, and checks them against a float64
 * reference computed here. Exit 0 when every output is within 1e-5.
 *
 *   install_client ENDPOINT
 */
#include <dash.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define S 48
#define D 32

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: install_client ENDPOINT\n");
        return 2;
    }
    struct dash_client *c;
    char why[1024];
    struct dash_connect_opts o = {.client_name = "install_client", .timeout_ms = 10000};
    int rc = dash_connect_explain(argv[1], &o, &c, why, sizeof why);
    if (rc) {
        fprintf(stderr, "install_client: %s (%s)\n", why, dash_errname(rc));
        return 1;
    }
    struct dash_buffer *in, *out;
    const size_t n = (size_t)S * D;
    if ((rc = dash_shm_alloc(c, 3 * n * sizeof(float), &in)) != 0 ||
        (rc = dash_shm_alloc(c, (n + S) * sizeof(float), &out)) != 0) {
        fprintf(stderr, "install_client: shm: %s: %s\n", dash_strerror(rc), dash_last_error(c));
        return 1;
    }
    float *x = dash_buffer_data(in), *y = dash_buffer_data(out);
    srand((unsigned)time(NULL));
    for (size_t i = 0; i < 3 * n; i++)
        x[i] = (float)rand() / (float)RAND_MAX * 2.0f - 1.0f;
    memset(y, 0xff, (n + S) * sizeof(float)); /* NaN everywhere: nothing passes unwritten */
    struct dash_tensor q = dash_tensor_dense(in, 0, 1, S, 1, D);
    struct dash_tensor k = dash_tensor_dense(in, n * sizeof(float), 1, S, 1, D);
    struct dash_tensor v = dash_tensor_dense(in, 2 * n * sizeof(float), 1, S, 1, D);
    struct dash_tensor ot = dash_tensor_dense(out, 0, 1, S, 1, D);
    struct dash_tensor lse = dash_tensor_lse(out, n * sizeof(float), 1, 1, S);
    struct dash_attn a = {.dtype = DASH_F32, .mask = DASH_MASK_CAUSAL};
    if ((rc = dash_forward(c, &a, &q, &k, &v, &ot, &lse, NULL)) != 0) {
        fprintf(stderr, "install_client: forward: %s: %s\n", dash_strerror(rc), dash_last_error(c));
        return 1;
    }
    const float *qp = x, *kp = x + n, *vp = x + 2 * n;
    double worst = 0.0, scale = 1.0 / sqrt((double)D);
    for (int i = 0; i < S; i++) {
        double m = -INFINITY, sum = 0.0, p[S], acc[D] = {0};
        for (int j = 0; j <= i; j++) {
            double dot = 0.0;
            for (int d = 0; d < D; d++)
                dot += (double)qp[i * D + d] * (double)kp[j * D + d];
            p[j] = dot * scale;
            m = p[j] > m ? p[j] : m;
        }
        for (int j = 0; j <= i; j++)
            sum += (p[j] = exp(p[j] - m));
        for (int j = 0; j <= i; j++)
            for (int d = 0; d < D; d++)
                acc[d] += p[j] / sum * (double)vp[j * D + d];
        for (int d = 0; d < D; d++) {
            double e = fabs(acc[d] - (double)y[i * D + d]);
            worst = e > worst || isnan(e) ? (isnan(e) ? INFINITY : e) : worst;
        }
    }
    dash_close(c);
    printf("install_client: forward through %s, largest error %.3g\n", argv[1], worst);
    return worst <= 1e-5 ? 0 : 1;
}
