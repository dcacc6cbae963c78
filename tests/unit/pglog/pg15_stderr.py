"""Events one PostgreSQL 15 cluster logged, in the stderr format with FULL_PREFIX: the csvlog and
jsonlog tests parse the same events in their formats and compare."""

PG15_STDERR = b'''\
2026-11-22 02:54:21.558 UTC [22612] LOG:  starting PostgreSQL 15.18 (Debian 15.18-0+deb12u1) on x86_64-pc-linux-gnu, compiled by gcc (Debian 12.2.0-14+deb12u1) 12.2.0, 64-bit
2026-11-22 02:54:21.653 UTC [22621] [unknown]@[unknown]/[unknown] [local] 00000 LOG:  connection received: host=[local]
2026-11-22 02:54:21.661 UTC [22621] postgres@postgres/exp [local] 23505 ERROR:  duplicate key value violates unique constraint "u_pkey"
2026-11-22 02:54:21.661 UTC [22621] postgres@postgres/exp [local] 23505 DETAIL:  Key (id)=(1) already exists.
2026-11-22 02:54:21.661 UTC [22621] postgres@postgres/exp [local] 23505 STATEMENT:  INSERT INTO u VALUES (1, 'b@example.com');
2026-11-22 02:54:21.662 UTC [22621] postgres@postgres/exp [local] P0001 ERROR:  custom failure 42
2026-11-22 02:54:21.662 UTC [22621] postgres@postgres/exp [local] P0001 DETAIL:  the detail 99
2026-11-22 02:54:21.662 UTC [22621] postgres@postgres/exp [local] P0001 HINT:  try "again"
2026-11-22 02:54:21.662 UTC [22621] postgres@postgres/exp [local] P0001 CONTEXT:  PL/pgSQL function inline_code_block line 1 at RAISE
2026-11-22 02:54:21.662 UTC [22621] postgres@postgres/exp [local] P0001 STATEMENT:  DO $$ BEGIN RAISE EXCEPTION 'custom failure %', 42 USING DETAIL = 'the detail 99', HINT = 'try "again"'; END $$;
2026-11-22 02:54:21.663 UTC [22621] postgres@postgres/exp [local] 42703 ERROR:  column "nope" does not exist at character 8
2026-11-22 02:54:21.663 UTC [22621] postgres@postgres/exp [local] 42703 QUERY:  SELECT nope        FROM u WHERE id = x
2026-11-22 02:54:21.663 UTC [22621] postgres@postgres/exp [local] 42703 CONTEXT:  PL/pgSQL function f(integer) line 1 at SQL statement
2026-11-22 02:54:21.663 UTC [22621] postgres@postgres/exp [local] 42703 STATEMENT:  SELECT f(7);
2026-11-22 02:54:21.663 UTC [22621] postgres@postgres/exp [local] 00000 LOG:  duration: 0.035 ms  statement: SELECT 'multi',
\t  'line' AS "quoted ""col""",
\t  2;
2026-11-22 02:54:21.678 UTC [22623] alice@postgres/[unknown] 127.0.0.1(37688) 28P01 FATAL:  password authentication failed for user "alice"
2026-11-22 02:54:21.678 UTC [22623] alice@postgres/[unknown] 127.0.0.1(37688) 28P01 DETAIL:  Role "alice" does not exist.
\tConnection matched pg_hba.conf line 5: "host    all             all   127.0.0.1/32     scram-sha-256"
2026-11-22 02:54:22.689 UTC [22614] LOG:  checkpoint complete: wrote 46 buffers (2.2%); 0 WAL file(s) added, 0 removed, 0 recycled; write=0.001 s, sync=0.001 s, total=0.002 s; sync files=0, longest=0.000 s, average=0.000 s; distance=168 kB, estimate=168 kB
'''  # noqa: E501 - real log lines, as PostgreSQL wrote them
