"""Lines a PostgreSQL 15 server (lc_messages C) wrote, captured from a throwaway cluster of
tests/pgcluster.py driven like tests/integration/workload.py (plus small max_wal_size, timeouts, a
cancel and a killed backend); log_line_prefix is PREFIX. The one long literal of the deadlock is
cut short (PostgreSQL cut it itself in the DETAIL, at track_activity_query_size). WRAPAROUND and
PANIC are not reproducible on a test cluster: their texts are varsup.c's and xlog.c's of PostgreSQL 15."""

PREFIX = "%m [%p] %q%u@%d/%a %r %e "

LOCK_WAIT = """\
2026-11-23 21:15:12.816 UTC [26312] postgres@shop/wl-lock-waiter [local] 00000 LOG:  process 26312 still waiting for ShareLock on transaction 748 after 200.149 ms
2026-11-23 21:15:12.816 UTC [26312] postgres@shop/wl-lock-waiter [local] 00000 DETAIL:  Process holding the lock: 26309. Wait queue: 26312.
2026-11-23 21:15:12.816 UTC [26312] postgres@shop/wl-lock-waiter [local] 00000 CONTEXT:  while updating tuple (0,1) in relation "accounts"
2026-11-23 21:15:12.816 UTC [26312] postgres@shop/wl-lock-waiter [local] 00000 STATEMENT:  UPDATE accounts SET balance = balance + 1, note = 's3cr3t-40' WHERE id = 1;
2026-11-23 21:15:12.860 UTC [26312] postgres@shop/wl-lock-waiter [local] 00000 LOG:  process 26312 acquired ShareLock on transaction 748 after 243.799 ms
"""  # noqa: E501 - real log lines

DEADLOCK = """\
2026-11-23 21:15:13.105 UTC [26316] postgres@shop/wl-deadlock-a [local] 00000 LOG:  process 26316 still waiting for ShareLock on transaction 751 after 200.143 ms
2026-11-23 21:15:13.105 UTC [26316] postgres@shop/wl-deadlock-a [local] 00000 DETAIL:  Process holding the lock: 26317. Wait queue: 26316.
2026-11-23 21:15:13.105 UTC [26316] postgres@shop/wl-deadlock-a [local] 00000 CONTEXT:  while updating tuple (0,2) in relation "accounts"
2026-11-23 21:15:13.105 UTC [26316] postgres@shop/wl-deadlock-a [local] 00000 STATEMENT:  UPDATE accounts SET note = 's3cr3t-43-xxxx' WHERE id = 2;
2026-11-23 21:15:13.309 UTC [26317] postgres@shop/wl-deadlock-b [local] 00000 LOG:  process 26317 detected deadlock while waiting for ShareLock on transaction 750 after 200.213 ms
2026-11-23 21:15:13.309 UTC [26317] postgres@shop/wl-deadlock-b [local] 00000 DETAIL:  Process holding the lock: 26316. Wait queue: .
2026-11-23 21:15:13.309 UTC [26317] postgres@shop/wl-deadlock-b [local] 00000 CONTEXT:  while updating tuple (0,3) in relation "accounts"
2026-11-23 21:15:13.309 UTC [26317] postgres@shop/wl-deadlock-b [local] 00000 STATEMENT:  UPDATE accounts SET note = 's3cr3t-44' WHERE id = 1;
2026-11-23 21:15:13.310 UTC [26317] postgres@shop/wl-deadlock-b [local] 40P01 ERROR:  deadlock detected
2026-11-23 21:15:13.310 UTC [26317] postgres@shop/wl-deadlock-b [local] 40P01 DETAIL:  Process 26317 waits for ShareLock on transaction 750; blocked by process 26316.
	Process 26316 waits for ShareLock on transaction 751; blocked by process 26317.
	Process 26317: UPDATE accounts SET note = 's3cr3t-44' WHERE id = 1;
	Process 26316: UPDATE accounts SET note = 's3cr3t-43-xxxx
2026-11-23 21:15:13.310 UTC [26317] postgres@shop/wl-deadlock-b [local] 40P01 HINT:  See server log for query details.
2026-11-23 21:15:13.310 UTC [26317] postgres@shop/wl-deadlock-b [local] 40P01 CONTEXT:  while updating tuple (0,3) in relation "accounts"
2026-11-23 21:15:13.310 UTC [26317] postgres@shop/wl-deadlock-b [local] 40P01 STATEMENT:  UPDATE accounts SET note = 's3cr3t-44' WHERE id = 1;
2026-11-23 21:15:13.310 UTC [26316] postgres@shop/wl-deadlock-a [local] 00000 LOG:  process 26316 acquired ShareLock on transaction 751 after 404.851 ms
2026-11-23 21:15:13.310 UTC [26316] postgres@shop/wl-deadlock-a [local] 00000 CONTEXT:  while updating tuple (0,2) in relation "accounts"
2026-11-23 21:15:13.310 UTC [26316] postgres@shop/wl-deadlock-a [local] 00000 STATEMENT:  UPDATE accounts SET note = 's3cr3t-43-xxxx' WHERE id = 2;
"""  # noqa: E501 - real log lines

AUTH_FAILURES = """\
2026-11-23 21:15:12.439 UTC [26292] app@shop/[unknown] 127.0.0.1(55098) 28P01 FATAL:  password authentication failed for user "app"
2026-11-23 21:15:12.439 UTC [26292] app@shop/[unknown] 127.0.0.1(55098) 28P01 DETAIL:  Connection matched pg_hba.conf line 5: "host    all             all   127.0.0.1/32     scram-sha-256"
2026-11-23 21:15:12.479 UTC [26296] app@postgres/[unknown] 127.0.0.1(55120) 28P01 FATAL:  password authentication failed for user "app"
2026-11-23 21:15:12.479 UTC [26296] app@postgres/[unknown] 127.0.0.1(55120) 28P01 DETAIL:  Connection matched pg_hba.conf line 5: "host    all             all   127.0.0.1/32     scram-sha-256"
2026-11-23 21:15:12.497 UTC [26298] ghost@postgres/[unknown] 127.0.0.1(55130) 28P01 FATAL:  password authentication failed for user "ghost"
2026-11-23 21:15:12.497 UTC [26298] ghost@postgres/[unknown] 127.0.0.1(55130) 28P01 DETAIL:  Role "ghost" does not exist.
	Connection matched pg_hba.conf line 5: "host    all             all   127.0.0.1/32     scram-sha-256"
"""  # noqa: E501 - real log lines

TEMP_FILE = """\
2026-11-23 21:15:12.583 UTC [26306] postgres@shop/wl-tempfile [local] 00000 LOG:  temporary file: path "base/pgsql_tmp/pgsql_tmp26306.0", size 2449408
2026-11-23 21:15:12.583 UTC [26306] postgres@shop/wl-tempfile [local] 00000 STATEMENT:  SELECT x, 's3cr3t-50' AS tag FROM big ORDER BY x DESC OFFSET 99999;
"""  # noqa: E501 - real log lines

TOO_MANY = """\
2026-11-23 21:15:13.536 UTC [26332] app@postgres/[unknown] [local] 53300 FATAL:  remaining connection slots are reserved for non-replication superuser connections
2026-11-23 21:15:13.656 UTC [26338] postgres@postgres/[unknown] [local] 53300 FATAL:  sorry, too many clients already
"""  # noqa: E501 - real log lines

AUTOVACUUM = """\
2026-11-23 21:15:13.503 UTC [26329] LOG:  automatic vacuum of table "shop.public.big": index scans: 0
	pages: 0 removed, 443 remain, 443 scanned (100.00% of total)
	tuples: 0 removed, 100000 remain, 0 are dead but not yet removable
	removable cutoff: 752, which was 0 XIDs old when operation ended
	new relfrozenxid: 733, which is 1 XIDs ahead of previous value
	index scan not needed: 0 pages from table (0.00% of total) had 0 dead item identifiers removed
	avg read rate: 0.957 MB/s, avg write rate: 1.913 MB/s
	buffer usage: 911 hits, 2 misses, 4 dirtied
	WAL usage: 444 records, 1 full page images, 34579 bytes
	system usage: CPU: user: 0.00 s, system: 0.00 s, elapsed: 0.01 s
2026-11-23 21:15:13.534 UTC [26329] LOG:  automatic analyze of table "shop.public.big"
	avg read rate: 1.260 MB/s, avg write rate: 0.504 MB/s
	buffer usage: 535 hits, 5 misses, 2 dirtied
	system usage: CPU: user: 0.02 s, system: 0.00 s, elapsed: 0.03 s
2026-11-23 21:15:13.535 UTC [26329] LOG:  automatic vacuum of table "shop.public.vac": index scans: 0
	pages: 0 removed, 2 remain, 2 scanned (100.00% of total)
	tuples: 100 removed, 100 remain, 0 are dead but not yet removable
	removable cutoff: 753, which was 0 XIDs old when operation ended
	new relfrozenxid: 735, which is 1 XIDs ahead of previous value
	index scan not needed: 2 pages from table (100.00% of total) had 100 dead item identifiers removed
	avg read rate: 22.944 MB/s, avg write rate: 45.888 MB/s
	buffer usage: 17 hits, 2 misses, 4 dirtied
	WAL usage: 7 records, 1 full page images, 9339 bytes
	system usage: CPU: user: 0.00 s, system: 0.00 s, elapsed: 0.00 s
2026-11-23 21:15:13.535 UTC [26332] [unknown]@[unknown]/[unknown] [local] 00000 LOG:  connection received: host=[local]
2026-11-23 21:15:13.536 UTC [26329] LOG:  automatic analyze of table "shop.public.vac"
	avg read rate: 0.000 MB/s, avg write rate: 0.000 MB/s
	buffer usage: 94 hits, 0 misses, 0 dirtied
	system usage: CPU: user: 0.00 s, system: 0.00 s, elapsed: 0.00 s
"""

CHECKPOINTS_WAL = """\
2026-11-23 21:15:14.277 UTC [26364] LOG:  checkpoints are occurring too frequently (0 seconds apart)
2026-11-23 21:15:14.277 UTC [26364] HINT:  Consider increasing the configuration parameter "max_wal_size".
2026-11-23 21:15:14.277 UTC [26364] LOG:  checkpoint starting: wal
2026-11-23 21:15:14.355 UTC [26364] LOG:  checkpoint complete: wrote 176 buffers (8.6%); 0 WAL file(s) added, 1 removed, 0 recycled; write=0.070 s, sync=0.001 s, total=0.079 s; sync files=0, longest=0.000 s, average=0.000 s; distance=1124 kB, estimate=1124 kB
2026-11-23 21:15:14.355 UTC [26364] LOG:  checkpoints are occurring too frequently (0 seconds apart)
2026-11-23 21:15:14.355 UTC [26364] HINT:  Consider increasing the configuration parameter "max_wal_size".
2026-11-23 21:15:14.355 UTC [26364] LOG:  checkpoint starting: wal
2026-11-23 21:15:14.422 UTC [26364] LOG:  checkpoint complete: wrote 1023 buffers (50.0%); 0 WAL file(s) added, 1 removed, 0 recycled; write=0.061 s, sync=0.001 s, total=0.067 s; sync files=0, longest=0.000 s, average=0.000 s; distance=16730 kB, estimate=16730 kB
2026-11-23 21:15:14.422 UTC [26364] LOG:  checkpoints are occurring too frequently (0 seconds apart)
2026-11-23 21:15:14.422 UTC [26364] HINT:  Consider increasing the configuration parameter "max_wal_size".
2026-11-23 21:15:14.422 UTC [26364] LOG:  checkpoint starting: wal
2026-11-23 21:15:14.486 UTC [26364] LOG:  checkpoint complete: wrote 1075 buffers (52.5%); 0 WAL file(s) added, 1 removed, 0 recycled; write=0.058 s, sync=0.001 s, total=0.064 s; sync files=0, longest=0.000 s, average=0.000 s; distance=16598 kB, estimate=16717 kB
"""  # noqa: E501 - real log lines

CHECKPOINT_IMMEDIATE = """\
2026-11-23 21:15:13.686 UTC [26267] LOG:  checkpoint starting: immediate force wait
2026-11-23 21:15:13.700 UTC [26267] LOG:  checkpoint complete: wrote 785 buffers (38.3%); 1 WAL file(s) added, 0 removed, 0 recycled; write=0.007 s, sync=0.001 s, total=0.015 s; sync files=0, longest=0.000 s, average=0.000 s; distance=10703 kB, estimate=10703 kB
"""  # noqa: E501 - real log lines

CANCELS = """\
2026-11-23 21:15:16.194 UTC [26440] postgres@shop/wl-timeout [local] 57014 ERROR:  canceling statement due to statement timeout
2026-11-23 21:15:16.194 UTC [26440] postgres@shop/wl-timeout [local] 57014 STATEMENT:  SELECT pg_sleep(1);
2026-11-23 21:15:17.313 UTC [26450] postgres@shop/wl-locktimeout [local] 55P03 ERROR:  canceling statement due to lock timeout at character 15
2026-11-23 21:15:17.313 UTC [26450] postgres@shop/wl-locktimeout [local] 55P03 STATEMENT:  SELECT * FROM accounts WHERE id = 1;
2026-11-23 21:15:18.343 UTC [26452] postgres@shop/wl-cancel [local] 57014 ERROR:  canceling statement due to user request
2026-11-23 21:15:18.343 UTC [26452] postgres@shop/wl-cancel [local] 57014 STATEMENT:  SELECT pg_sleep(30);
"""  # noqa: E501 - real log lines

CRASH = """\
2026-11-23 21:15:19.386 UTC [26362] LOG:  server process (PID 26476) was terminated by signal 9: Killed
2026-11-23 21:15:19.386 UTC [26362] DETAIL:  Failed process was running: SELECT pg_sleep(30);
2026-11-23 21:15:19.387 UTC [26362] LOG:  terminating any other active server processes
2026-11-23 21:15:19.395 UTC [26362] LOG:  all server processes terminated; reinitializing
2026-11-23 21:15:19.405 UTC [26481] LOG:  database system was interrupted; last known up at 2026-11-23 21:15:16 UTC
2026-11-23 21:15:19.406 UTC [26481] LOG:  database system was not properly shut down; automatic recovery in progress
"""

WRAPAROUND = """\
2026-11-23 21:15:20.001 UTC [26500] app@shop/app 127.0.0.1(55200) 01000 WARNING:  database "shop" must be vacuumed within 9999999 transactions
2026-11-23 21:15:20.001 UTC [26500] app@shop/app 127.0.0.1(55200) 01000 HINT:  To avoid a database shutdown, execute a database-wide VACUUM in that database.
	You might also need to commit or roll back old prepared transactions, or drop stale replication slots.
2026-11-23 21:15:20.002 UTC [26500] app@shop/app 127.0.0.1(55200) 01000 WARNING:  oldest xmin is far in the past
2026-11-23 21:15:20.002 UTC [26500] app@shop/app 127.0.0.1(55200) 01000 HINT:  Close open transactions soon to avoid wraparound problems.
	You might also need to commit or roll back old prepared transactions, or drop stale replication slots.
2026-11-23 21:15:20.003 UTC [26500] app@shop/app 127.0.0.1(55200) 54000 ERROR:  database is not accepting commands to avoid wraparound data loss in database "shop"
2026-11-23 21:15:20.003 UTC [26500] app@shop/app 127.0.0.1(55200) 54000 HINT:  Stop the postmaster and vacuum that database in single-user mode.
	You might also need to commit or roll back old prepared transactions, or drop stale replication slots.
2026-11-23 21:15:20.003 UTC [26500] app@shop/app 127.0.0.1(55200) 54000 STATEMENT:  INSERT INTO accounts VALUES (3, 1);
"""  # noqa: E501 - real log lines

PANIC = """\
2026-11-23 21:15:21.000 UTC [26364] PANIC:  could not write to file "pg_wal/xlogtemp.26364": No space left on device
"""


# Names PostgreSQL prints as they are, unquoted and unescaped (vacuumlazy.c/analyze.c "%s.%s.%s",
# lmgr.c `relation "%s"`): captured the same way from databases `Shop` and `we'ird "db"; $$ x`, each
# with tables `vac"tbl`, `select`, `my.table` (and `Tab"le; --` in Shop, deadlocked), with
# autovacuum_naptime = 1s and zero thresholds.
AUTOVACUUM_HOSTILE = """\
2026-11-25 09:40:34.891 UTC [5477] LOG:  automatic vacuum of table "Shop.public.vac"tbl": index scans: 1
	pages: 0 removed, 1 remain, 1 scanned (100.00% of total)
	tuples: 49 removed, 51 remain, 0 are dead but not yet removable
	removable cutoff: 746, which was 13 XIDs old when operation ended
	new relfrozenxid: 727, which is 1 XIDs ahead of previous value
	index scan needed: 1 pages from table (100.00% of total) had 49 dead item identifiers removed
	index "vac"tbl_pkey": pages: 2 in total, 0 newly deleted, 0 currently deleted, 0 reusable
	avg read rate: 35.351 MB/s, avg write rate: 35.351 MB/s
	buffer usage: 52 hits, 4 misses, 4 dirtied
	WAL usage: 6 records, 1 full page images, 9078 bytes
	system usage: CPU: user: 0.00 s, system: 0.00 s, elapsed: 0.00 s
2026-11-25 09:40:34.895 UTC [5477] LOG:  automatic analyze of table "Shop.public.vac"tbl"
	avg read rate: 23.438 MB/s, avg write rate: 9.766 MB/s
	buffer usage: 176 hits, 12 misses, 5 dirtied
	system usage: CPU: user: 0.00 s, system: 0.00 s, elapsed: 0.00 s
2026-11-25 09:40:34.641 UTC [5476] LOG:  automatic vacuum of table "we'ird "db"; $$ x.public.vac"tbl": index scans: 1
	pages: 0 removed, 1 remain, 1 scanned (100.00% of total)
	tuples: 49 removed, 51 remain, 0 are dead but not yet removable
	removable cutoff: 751, which was 0 XIDs old when operation ended
	new relfrozenxid: 736, which is 1 XIDs ahead of previous value
	index scan needed: 1 pages from table (100.00% of total) had 49 dead item identifiers removed
	index "vac"tbl_pkey": pages: 2 in total, 0 newly deleted, 0 currently deleted, 0 reusable
	avg read rate: 27.852 MB/s, avg write rate: 27.852 MB/s
	buffer usage: 52 hits, 4 misses, 4 dirtied
	WAL usage: 6 records, 1 full page images, 9078 bytes
	system usage: CPU: user: 0.00 s, system: 0.00 s, elapsed: 0.00 s
2026-11-25 09:40:34.646 UTC [5476] LOG:  automatic vacuum of table "we'ird "db"; $$ x.public.select": index scans: 0
	pages: 1 removed, 0 remain, 1 scanned (100.00% of total)
	tuples: 100 removed, 0 remain, 0 are dead but not yet removable
	removable cutoff: 752, which was 1 XIDs old when operation ended
	new relfrozenxid: 752, which is 14 XIDs ahead of previous value
	index scan not needed: 1 pages from table (100.00% of total) had 100 dead item identifiers removed
	avg read rate: 45.224 MB/s, avg write rate: 45.224 MB/s
	buffer usage: 15 hits, 4 misses, 4 dirtied
	WAL usage: 6 records, 1 full page images, 9034 bytes
	system usage: CPU: user: 0.00 s, system: 0.00 s, elapsed: 0.00 s
2026-11-25 09:40:34.896 UTC [5477] LOG:  automatic vacuum of table "Shop.public.select": index scans: 0
	pages: 1 removed, 0 remain, 1 scanned (100.00% of total)
	tuples: 100 removed, 0 remain, 0 are dead but not yet removable
	removable cutoff: 746, which was 15 XIDs old when operation ended
	new relfrozenxid: 746, which is 17 XIDs ahead of previous value
	index scan not needed: 1 pages from table (100.00% of total) had 100 dead item identifiers removed
	avg read rate: 46.572 MB/s, avg write rate: 46.572 MB/s
	buffer usage: 15 hits, 4 misses, 4 dirtied
	WAL usage: 6 records, 1 full page images, 9034 bytes
	system usage: CPU: user: 0.00 s, system: 0.00 s, elapsed: 0.00 s
2026-11-25 09:40:34.896 UTC [5477] LOG:  automatic analyze of table "Shop.public.select"
	avg read rate: 0.000 MB/s, avg write rate: 0.000 MB/s
	buffer usage: 6 hits, 0 misses, 0 dirtied
	system usage: CPU: user: 0.00 s, system: 0.00 s, elapsed: 0.00 s
2026-11-25 09:40:34.896 UTC [5477] LOG:  automatic vacuum of table "Shop.public.my.table": index scans: 0
	pages: 1 removed, 0 remain, 1 scanned (100.00% of total)
	tuples: 100 removed, 0 remain, 0 are dead but not yet removable
	removable cutoff: 746, which was 16 XIDs old when operation ended
	new relfrozenxid: 746, which is 14 XIDs ahead of previous value
	index scan not needed: 1 pages from table (100.00% of total) had 100 dead item identifiers removed
	avg read rate: 72.171 MB/s, avg write rate: 72.171 MB/s
	buffer usage: 15 hits, 4 misses, 4 dirtied
	WAL usage: 6 records, 1 full page images, 9034 bytes
	system usage: CPU: user: 0.00 s, system: 0.00 s, elapsed: 0.00 s
2026-11-25 09:40:35.991 UTC [5499] LOG:  automatic vacuum of table "Shop.pg_catalog.pg_statistic": index scans: 1
	pages: 0 removed, 26 remain, 26 scanned (100.00% of total)
	tuples: 145 removed, 408 remain, 0 are dead but not yet removable
	removable cutoff: 788, which was 0 XIDs old when operation ended
	new relfrozenxid: 759, which is 43 XIDs ahead of previous value
	index scan needed: 9 pages from table (34.62% of total) had 144 dead item identifiers removed
	index "pg_statistic_relid_att_inh_index": pages: 5 in total, 0 newly deleted, 0 currently deleted, 0 reusable
	avg read rate: 102.291 MB/s, avg write rate: 0.000 MB/s
	buffer usage: 94 hits, 8 misses, 0 dirtied
	WAL usage: 40 records, 0 full page images, 3581 bytes
	system usage: CPU: user: 0.00 s, system: 0.00 s, elapsed: 0.00 s
2026-11-25 09:40:35.995 UTC [5499] LOG:  automatic vacuum of table "Shop.pg_toast.pg_toast_2619": index scans: 1
	pages: 0 removed, 3 remain, 3 scanned (100.00% of total)
	tuples: 2 removed, 14 remain, 0 are dead but not yet removable
	removable cutoff: 789, which was 0 XIDs old when operation ended
	new relfrozenxid: 764, which is 48 XIDs ahead of previous value
	index scan needed: 1 pages from table (33.33% of total) had 2 dead item identifiers removed
	index "pg_toast_2619_index": pages: 2 in total, 0 newly deleted, 0 currently deleted, 0 reusable
	avg read rate: 73.703 MB/s, avg write rate: 147.406 MB/s
	buffer usage: 45 hits, 1 misses, 2 dirtied
	WAL usage: 7 records, 0 full page images, 658 bytes
	system usage: CPU: user: 0.00 s, system: 0.00 s, elapsed: 0.00 s
2026-11-25 09:40:35.193 UTC [5478] LOG:  automatic aggressive vacuum of table "template1.information_schema.sql_sizing": index scans: 0
	pages: 0 removed, 1 remain, 1 scanned (100.00% of total)
	tuples: 0 removed, 23 remain, 0 are dead but not yet removable
	removable cutoff: 787, which was 0 XIDs old when operation ended
	new relfrozenxid: 787, which is 71 XIDs ahead of previous value
	index scan not needed: 0 pages from table (0.00% of total) had 0 dead item identifiers removed
	avg read rate: 0.000 MB/s, avg write rate: 162.760 MB/s
	buffer usage: 17 hits, 0 misses, 1 dirtied
	WAL usage: 1 records, 1 full page images, 7869 bytes
	system usage: CPU: user: 0.00 s, system: 0.00 s, elapsed: 0.00 s
2026-11-25 09:40:35.992 UTC [5499] LOG:  automatic vacuum of table "Shop.public.Tab"le; --": index scans: 0
	pages: 0 removed, 1 remain, 1 scanned (100.00% of total)
	tuples: 3 removed, 2 remain, 0 are dead but not yet removable
	removable cutoff: 788, which was 0 XIDs old when operation ended
	new relfrozenxid: 746, which is 2 XIDs ahead of previous value
	index scan not needed: 0 pages from table (0.00% of total) had 0 dead item identifiers removed
	avg read rate: 47.565 MB/s, avg write rate: 47.565 MB/s
	buffer usage: 26 hits, 4 misses, 4 dirtied
	WAL usage: 3 records, 1 full page images, 8508 bytes
	system usage: CPU: user: 0.00 s, system: 0.00 s, elapsed: 0.00 s
"""  # noqa: E501 - real log lines

LOCK_WAIT_QUOTED = """\
2026-11-25 09:40:34.245 UTC [5457] postgres@Shop/a [local] 00000 LOG:  process 5457 still waiting for ShareLock on transaction 747 after 200.154 ms
2026-11-25 09:40:34.245 UTC [5457] postgres@Shop/a [local] 00000 DETAIL:  Process holding the lock: 5458. Wait queue: 5457.
2026-11-25 09:40:34.245 UTC [5457] postgres@Shop/a [local] 00000 CONTEXT:  while updating tuple (0,2) in relation "Tab"le; --"
2026-11-25 09:40:34.245 UTC [5457] postgres@Shop/a [local] 00000 STATEMENT:  UPDATE "Tab""le; --" SET n=2 WHERE id=2;
"""  # noqa: E501 - real log lines

DEADLOCK_QUOTED = """\
2026-11-25 09:40:34.746 UTC [5458] postgres@Shop/b [local] 40P01 ERROR:  deadlock detected
2026-11-25 09:40:34.746 UTC [5458] postgres@Shop/b [local] 40P01 DETAIL:  Process 5458 waits for ShareLock on transaction 746; blocked by process 5457.
	Process 5457 waits for ShareLock on transaction 747; blocked by process 5458.
	Process 5458: UPDATE "Tab""le; --" SET n=2 WHERE id=1;
	Process 5457: UPDATE "Tab""le; --" SET n=2 WHERE id=2;
2026-11-25 09:40:34.746 UTC [5458] postgres@Shop/b [local] 40P01 HINT:  See server log for query details.
2026-11-25 09:40:34.746 UTC [5458] postgres@Shop/b [local] 40P01 CONTEXT:  while updating tuple (0,1) in relation "Tab"le; --"
2026-11-25 09:40:34.746 UTC [5458] postgres@Shop/b [local] 40P01 STATEMENT:  UPDATE "Tab""le; --" SET n=2 WHERE id=1;
"""  # noqa: E501 - real log lines
