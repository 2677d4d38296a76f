"""``make chaos``: the normalizer worker under faults and bad input, on real Kafka and Redis.

Not part of ``make test`` (about 15 minutes). Starts its own broker and Redis with
``deploy/services.sh`` on their own ports (default Kafka 19710/19711, Redis 19712,
state ``/tmp/rw-chaos``; ``--kafka-port`` / ``--redis-port`` / ``--state``), runs
``reasonwire worker normalize`` as real processes, and publishes runs built from
the in-repo fixture streams (tests/fixtures), each with unique ids and opaque
values. Scenarios, one fault each, in order: baseline; SIGKILL of the worker at
three points; a rebalance with two workers; Redis ``SHUTDOWN SAVE`` and
``SHUTDOWN NOSAVE`` (with the AOF services.sh configures); a 30 s Redis outage
under load (worker log bytes, CPU and ``/readyz`` measured); a broker restart;
the bad-input corpus (chaos.load.bad_cases); the operational events: a
worker paused (SIGSTOP) longer than a short inactivity timeout, a burst backlog,
a paused worker thawed after its partitions moved, Redis restored from an older
copy of its files and after ``appendonly no``, an evicting Redis, the replay
worker during a Redis outage, raw partitions added mid-stream; Redis restarted
with its files gone (the store lost: the epoch path). Then it reads every output from the
beginning and checks every run against the offline translation of its own
records after de-duplication by (run, ``rw-event-seq``): lost, duplicated and
inconsistent (two different events under one number, or one that differs from
the reference) events; runs with two different events under one number and runs
ended twice; per scenario the worker log bytes and CPU, and (where it applies) runs
whose artefacts left Redis; dead letters by reason; partitions left uncommitted
(wedged); opaque values in worker logs. One table (also ``out/chaos/table.md``)
with a verdict per row; exit status 1 if any row fails.

One scenario, several times: ``python -m chaos --only redis_outage --repeat 5`` runs it five
times in a row (``redis_outage``, ``redis_outage_r2`` …) and the table lists the five
``/readyz`` recovery times; each measured Redis outage also leaves
``out/chaos/readyz_after_redis.<n>.txt``, every ``/readyz`` answer after Redis came back
(wall clock, to read beside the worker's log, and why it was not ready).
"""
