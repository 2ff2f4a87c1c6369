"""The latency pair's server (job.py server): its service time, measured as its phases serve.

The server's request rate is a load (0.5) over its service time, and the load it then offers is
that rate times the mean time its requests take. Measured as requests back to back, or each
after a short fixed pause, the time comes out short or long of what the phases see: on H200s
the median of 100 requests each after 5 ms came out 5.98 to 9.73 ms where the same server's
requests took about 8 ms in its solo phases, so it offered 0.67 and 0.38 of its time, not 0.5.
A request that finds the GPU idle after a gap of the arrival process's length takes longer
than one after 5 ms, and a few slow ones move the mean, which the load follows, not the median.
So the first estimate only sets a rate: the server then serves rounds of requests arriving as
in its phases (exponential gaps at that rate) and takes their mean, each round at the rate the
last gave. The mean leaves out the slowest and fastest TRIM of a round, so one stall of the
host does not set the rate for the whole run.

Pure (no torch): job.py passes the serving and the clock.
"""

import random
import statistics
import time

ROUNDS = 2
REQUESTS = 80
TRIM = 0.05
# An arrival further behind now than this is moved up to it (as job.py's warm-up does), so a
# slow request does not leave a backlog that the next ones are served from back to back.
BEHIND_S = 0.05


def trimmed_mean(xs, trim=TRIM):
    """The mean of xs without the lowest and highest `trim` of them."""
    s = sorted(xs)
    k = int(len(s) * trim)
    return statistics.fmean(s[k:len(s) - k] or s)


def measure(serve, first_s, load, rounds=ROUNDS, requests=REQUESTS, rng=None, now=time.time):
    """The service time in seconds, and each round's: serve(arrival) serves a request
    arriving at `arrival` (on now's clock) and returns the time it took; first_s is the first
    estimate, which sets the first round's rate (load / service time)."""
    rng = rng or random.Random(3)
    service, seen = first_s, []
    for _ in range(rounds):
        rate = load / service
        times, arrival = [], now()
        for _ in range(requests):
            arrival = max(arrival, now() - BEHIND_S) + rng.expovariate(rate)
            times.append(serve(arrival))
        service = trimmed_mean(times)
        seen.append(service)
    return service, seen
