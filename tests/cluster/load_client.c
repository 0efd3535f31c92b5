/* load_client: one rank of the load tests (tests/cluster/test_load.py).
 *
 *   load_client PAIRS RATE [KIND]
 *
 * Sends PAIRS asynchronous BEGIN KIND / END bytes=B pairs through
 * libjoulestep-client, paced at RATE markers per second (0: as fast as
 * possible), B = rank * 1000000 + k for the k-th pair, then one sync PING: its
 * reply means the plugin has handled every marker of this connection (one
 * connection, ordered). Prints one line:
 *
 *   RANK <rank> <node> sent=<pairs both calls returned 0> err_begin=<n> err_end=<n>
 *        first_rc=<first nonzero rc or 0> max_lat_ns=<slowest call> ping_rc=<rc>
 *        t0_ns=<first marker> t1_ns=<last marker>   (CLOCK_MONOTONIC)
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "joulestep/client.h"

static long long now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void sleep_until(long long t)
{
	struct timespec ts = {(time_t)(t / 1000000000LL), (long)(t % 1000000000LL)};
	while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
		;
}

int main(int argc, char **argv)
{
	if (argc < 3) {
		fprintf(stderr, "usage: load_client PAIRS RATE [KIND]\n");
		return 2;
	}
	long pairs = atol(argv[1]);
	double rate = atof(argv[2]);
	const char *kind = argc > 3 ? argv[3] : "write";
	const char *r = getenv("SLURM_PROCID"), *node = getenv("SLURMD_NODENAME");
	long long rank = r ? atoll(r) : 0;
	long sent = 0, err_begin = 0, err_end = 0;
	int first_rc = 0;
	long long max_lat = 0, t0 = now_ns(), t1 = t0;
	for (long k = 0; k < pairs; k++) {
		int rc[2] = {0, 0};
		for (int i = 0; i < 2 && (i == 0 || rc[0] == 0); i++) { /* no END for a failed BEGIN */
			if (rate > 0)
				sleep_until(t0 + (long long)((2 * k + i) * 1e9 / rate));
			long long a = now_ns();
			rc[i] = i == 0 ? js_phase_begin(kind, NULL) : js_phase_end(rank * 1000000 + k);
			t1 = now_ns();
			if (t1 - a > max_lat)
				max_lat = t1 - a;
			if (rc[i] != 0 && !first_rc)
				first_rc = rc[i];
		}
		err_begin += rc[0] != 0;
		err_end += rc[0] == 0 && rc[1] != 0;
		sent += rc[0] == 0 && rc[1] == 0;
	}
	long long a = now_ns();
	int ping = js_phase_ping();
	if (now_ns() - a > max_lat)
		max_lat = now_ns() - a;
	printf("RANK %lld %s sent=%ld err_begin=%ld err_end=%ld first_rc=%d max_lat_ns=%lld ping_rc=%d "
	       "t0_ns=%lld t1_ns=%lld\n",
	       rank, node ? node : "-", sent, err_begin, err_end, first_rc, max_lat, ping, t0, t1);
	return 0;
}
