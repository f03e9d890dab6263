#!/usr/bin/env python3
"""How the pacer's constants were chosen (activities/src/pacing/bucket.rs): a simulation of
daemons, each with its own adaptive bucket, sending into one AWS account bucket (EC2 mutating:
20 burst, 5 a second), in 10 ms ticks, every daemon with more work than the account admits.

Prints, for each setting: the throttled share of 3 daemons started together (60 requests each),
their wall time over the bucket's floor, one daemon's wall time over the floor for 650 requests
(the fleet benchmark), and one daemon's time for a 3-zone provision's 42 mutating requests.
It models no latency and no retries' backoff: it ranks settings, the tests measure them."""
import itertools


def run(daemons=3, per=60, cut=0.5, creep=0.005, start_creep=0.1, start=1 / 3, burst_share=0.5,
        one_event=1.0, window=3.0, limit=(20, 5), aws=(20, 5), dt=0.01):
    burst, rate = limit
    aws_tokens, t, throttled, admitted = aws[0], 0.0, 0, 0
    ds = [dict(rate=rate * start, tokens=max(1, burst * burst_share), cut_at=None, admitted=[], left=per)
          for _ in range(daemons)]
    while any(d['left'] > 0 for d in ds) and t < 900:
        t += dt
        aws_tokens = min(aws[0], aws_tokens + aws[1] * dt)
        for d in ds:
            d['tokens'] = min(max(1, burst * burst_share * d['rate'] / rate), d['tokens'] + d['rate'] * dt)
            d['rate'] = min(rate, d['rate'] + (creep if d['cut_at'] is not None else start_creep) * rate * dt)
            while d['left'] > 0 and d['tokens'] >= 1:
                d['tokens'] -= 1
                if aws_tokens >= 1:
                    aws_tokens -= 1
                    admitted += 1
                    d['left'] -= 1
                    d['admitted'].append(t)
                    continue
                throttled += 1
                if d['cut_at'] is None or t - d['cut_at'] >= one_event:
                    d['admitted'] = [a for a in d['admitted'] if t - a <= window]
                    got = len(d['admitted']) / max(0.5, min(window, t))
                    d['rate'] = max(0.1, cut * min(d['rate'], got))
                    d['tokens'] = min(d['tokens'], 0)
                    d['cut_at'] = t
    return throttled, admitted, t


def floor(admitted):
    return (admitted - 20) / 5


rows = []
for cut, creep, start_creep, start in itertools.product([0.5, 0.7], [0.005, 0.01], [0.05, 0.1, 0.2], [1 / 3, 0.5, 1.0]):
    kw = dict(cut=cut, creep=creep, start_creep=start_creep, start=start)
    thr, adm, t = run(**kw)
    _, adm1, t1 = run(daemons=1, per=650, **kw)
    _, _, t42 = run(daemons=1, per=42, **kw)
    rows.append((thr / (thr + adm), t / floor(adm), t1 / floor(adm1), t42, kw))
for share, three, one, t42, kw in sorted(rows, key=lambda r: r[0]):
    print(f"3 daemons: {100 * share:4.1f}% throttled, {three:.2f}x floor | 1 daemon: {one:.3f}x floor, "
          f"42 requests in {t42:4.1f} s | {kw}")
