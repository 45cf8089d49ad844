/*-------------------------------------------------------------------------
 * linger.c
 *	  How long forward lingers after the doorbell rang, before it fetches:
 *	  --linger-ms, or (auto, the default) chosen from the rate it sees.
 *
 * A page costs the database about the same whether it holds one event or
 * ten: a fetch over the group's slots, a lease written, an acknowledgement,
 * two commits (docs/performance.md).  At a few hundred events a second,
 * a forwarder that fetches at every ring pays that for each commit's
 * event.  Waiting a little after the ring lets a page gather the events
 * committed meanwhile, for that much more latency.
 *
 * auto lingers only where that buys something: long enough for a page of
 * about AUTO_GOAL events at the rate events have been coming, never more
 * than AUTO_CAP_MS (so a commit reaches the stream well within 50 ms), and
 * not at all when, at that rate, a linger would gather less than one more
 * event: slow trickles keep the latency of a fetch at every ring.  A
 * backlog is unaffected: forward waits only once it has caught up.
 *-------------------------------------------------------------------------
 */
#include <time.h>

#include "eo_nats.h"

#define AUTO_GOAL 8				/* events a page should gather */
#define AUTO_CAP_MS 30.0
#define RATE_WEIGHT 0.3			/* of the newest interval in the rate */

static double
now_seconds(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double) ts.tv_sec + (double) ts.tv_nsec / 1e9;
}

void
linger_init(Linger *l, int fixed_ms)
{
	l->fixed_ms = fixed_ms;
	l->rate = 0;
	l->last = 0;
}

/*
 * A fetch handed out `events`: the rate is events delivered over the time
 * since the fetch before, which in a steady state is the rate they are
 * committed at (a forwarder that keeps up delivers every one), smoothed.
 */
void
linger_saw(Linger *l, int events)
{
	double		now = now_seconds();
	double		since = now - l->last;

	if (l->last > 0 && since > 0)
	{
		double		rate = events / since;

		l->rate = l->rate > 0 ? (1 - RATE_WEIGHT) * l->rate + RATE_WEIGHT * rate : rate;
	}
	l->last = now;
}

/* The linger of the next wait, in ms. */
int
linger_ms(const Linger *l)
{
	double		ms;

	if (l->fixed_ms >= 0)
		return l->fixed_ms;
	if (l->rate <= 0)
		return 0;
	ms = (AUTO_GOAL - 1) * 1000.0 / l->rate;
	if (ms > AUTO_CAP_MS)
		ms = AUTO_CAP_MS;
	if (l->rate * ms / 1000.0 < 1.0)
		return 0;				/* less than one more event: only latency */
	return (int) (ms + 0.5);
}

/*
 * Do events come, at the rate seen, so often that a wait of `ms` after a
 * page is most likely to end in a ring, not in its timeout?  Three events
 * expected in it: commits that come at random (a Poisson stream) leave it
 * without one about one time in twenty (forward.c: whether a page waits
 * for the next fetch to be acknowledged; a wait that times out then costs
 * an empty fetch more than acknowledging the page on its own would).
 */
bool
linger_expects_within(const Linger *l, int ms)
{
	return l->rate * ms / 1000.0 >= 3.0;
}
