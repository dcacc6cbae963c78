"""Lines PostgreSQL 15 wrote with unusual `log_line_prefix`es and `log_timezone`s (captured from
real clusters; the integration test tests/integration/test_time_zones_pg.py makes them afresh).

Each: (log_timezone, log_line_prefix, the log excerpt)."""

NEW_YORK = (
    "America/New_York",
    "%p %m %q%u@%d ",
    """\
13134 2026-11-23 22:34:25.079 EST LOG:  database system was shut down at 2026-11-23 22:34:25 EST
13139 2026-11-23 22:34:25.164 EST [unknown]@[unknown] LOG:  connection received: host=[local]
13139 2026-11-23 22:34:25.165 EST postgres@postgres LOG:  connection authorized: user=postgres database=postgres application_name=app=[x] y,z
13139 2026-11-23 22:34:25.171 EST postgres@postgres ERROR:  division by zero
13139 2026-11-23 22:34:25.171 EST postgres@postgres STATEMENT:  SELECT 1/0;
13141 2026-11-23 22:34:25.183 EST postgres@postgres LOG:  connection authorized: user=postgres database=postgres application_name=[bracket] app, with comma
13141 2026-11-23 22:34:25.184 EST postgres@postgres ERROR:  invalid input syntax for type integer: "x" at character 8
13141 2026-11-23 22:34:25.184 EST postgres@postgres STATEMENT:  SELECT 'x'::int;
13143 2026-11-23 22:34:25.192 EST nobody@postgres FATAL:  role "nobody" does not exist
13132 2026-11-23 22:34:25.201 EST LOG:  checkpoint starting: immediate force wait
""",  # noqa: E501 - real log lines, as PostgreSQL wrote them
)

SAO_PAULO = (
    "America/Sao_Paulo",
    "pid=%p,user=%u,db=%d,app=%a,client=%h,xid=%x,vxid=%v ",
    """\
pid=13168,user=,db=,app=,client=,xid=0,vxid= LOG:  database system was shut down at 2026-11-24 00:34:26 -03
pid=13173,user=[unknown],db=[unknown],app=[unknown],client=[local],xid=0,vxid= LOG:  connection received: host=[local]
pid=13173,user=postgres,db=postgres,app=[unknown],client=[local],xid=0,vxid=3/1 LOG:  connection authorized: user=postgres database=postgres application_name=app=[x] y,z
pid=13173,user=postgres,db=postgres,app=app=[x] y,z,client=[local],xid=0,vxid=3/3 ERROR:  division by zero
pid=13173,user=postgres,db=postgres,app=app=[x] y,z,client=[local],xid=0,vxid=3/3 STATEMENT:  SELECT 1/0;
pid=13175,user=postgres,db=postgres,app=[unknown],client=[local],xid=0,vxid=3/4 LOG:  connection authorized: user=postgres database=postgres application_name=[bracket] app, with comma
pid=13175,user=postgres,db=postgres,app=[bracket] app, with comma,client=[local],xid=0,vxid=3/5 ERROR:  invalid input syntax for type integer: "x" at character 8
pid=13175,user=postgres,db=postgres,app=[bracket] app, with comma,client=[local],xid=0,vxid=3/5 STATEMENT:  SELECT 'x'::int;
pid=13177,user=nobody,db=postgres,app=[unknown],client=[local],xid=0,vxid=3/6 FATAL:  role "nobody" does not exist
pid=13166,user=,db=,app=,client=,xid=0,vxid= LOG:  checkpoint starting: immediate force wait
""",  # noqa: E501 - real log lines, as PostgreSQL wrote them
)

UTC_Q = (
    "UTC",
    "%m [%p] %q%u@%d ",
    """\
2026-11-24 03:34:27.648 UTC [13202] LOG:  database system was shut down at 2026-11-24 03:34:27 UTC
2026-11-24 03:34:27.735 UTC [13207] [unknown]@[unknown] LOG:  connection received: host=[local]
2026-11-24 03:34:27.736 UTC [13207] postgres@postgres LOG:  connection authorized: user=postgres database=postgres application_name=app=[x] y,z
2026-11-24 03:34:27.743 UTC [13207] postgres@postgres ERROR:  division by zero
2026-11-24 03:34:27.743 UTC [13207] postgres@postgres STATEMENT:  SELECT 1/0;
2026-11-24 03:34:27.752 UTC [13209] postgres@postgres LOG:  connection authorized: user=postgres database=postgres application_name=[bracket] app, with comma
2026-11-24 03:34:27.753 UTC [13209] postgres@postgres ERROR:  invalid input syntax for type integer: "x" at character 8
2026-11-24 03:34:27.753 UTC [13209] postgres@postgres STATEMENT:  SELECT 'x'::int;
2026-11-24 03:34:27.762 UTC [13211] nobody@postgres FATAL:  role "nobody" does not exist
2026-11-24 03:34:27.770 UTC [13200] LOG:  checkpoint starting: immediate force wait
""",  # noqa: E501 - real log lines, as PostgreSQL wrote them
)

KOLKATA_EPOCH = (
    "Asia/Kolkata",
    "%n [%-10u] ",
    """\
1795491269.047 [          ] LOG:  database system was shut down at 2026-11-24 09:04:28 IST
1795491269.132 [[unknown] ] LOG:  connection received: host=[local]
1795491269.132 [postgres  ] LOG:  connection authorized: user=postgres database=postgres application_name=app=[x] y,z
1795491269.139 [postgres  ] ERROR:  division by zero
1795491269.139 [postgres  ] STATEMENT:  SELECT 1/0;
1795491269.149 [postgres  ] LOG:  connection authorized: user=postgres database=postgres application_name=[bracket] app, with comma
1795491269.150 [postgres  ] ERROR:  invalid input syntax for type integer: "x" at character 8
1795491269.150 [postgres  ] STATEMENT:  SELECT 'x'::int;
1795491269.159 [nobody    ] FATAL:  role "nobody" does not exist
1795491269.166 [          ] LOG:  checkpoint starting: immediate force wait
""",  # noqa: E501 - real log lines, as PostgreSQL wrote them
)

BERLIN_EVERY_ESCAPE = (
    "Europe/Berlin",
    "%c %s %t %l %e %i %b %Q %P [%10p] %q[%-10a] ",
    """\
6b0505c6.33d6 2026-11-24 04:34:30 CET 2026-11-24 04:34:30 CET 1 00000  startup 0  [     13270] LOG:  database system was shut down at 2026-11-24 04:34:30 CET
6b0505c6.33db 2026-11-24 04:34:30 CET 2026-11-24 04:34:30 CET 1 00000  not initialized 0  [     13275] [[unknown] ] LOG:  connection received: host=[local]
6b0505c6.33db 2026-11-24 04:34:30 CET 2026-11-24 04:34:30 CET 2 00000 authentication client backend 0  [     13275] [[unknown] ] LOG:  connection authorized: user=postgres database=postgres application_name=app=[x] y,z
6b0505c6.33db 2026-11-24 04:34:30 CET 2026-11-24 04:34:30 CET 3 22012 SELECT client backend 0  [     13275] [app=[x] y,z] ERROR:  division by zero
6b0505c6.33db 2026-11-24 04:34:30 CET 2026-11-24 04:34:30 CET 4 22012 SELECT client backend 0  [     13275] [app=[x] y,z] STATEMENT:  SELECT 1/0;
6b0505c6.33dd 2026-11-24 04:34:30 CET 2026-11-24 04:34:30 CET 2 00000 authentication client backend 0  [     13277] [[unknown] ] LOG:  connection authorized: user=postgres database=postgres application_name=[bracket] app, with comma
6b0505c6.33dd 2026-11-24 04:34:30 CET 2026-11-24 04:34:30 CET 3 22P02 SELECT client backend 0  [     13277] [[bracket] app, with comma] ERROR:  invalid input syntax for type integer: "x" at character 8
6b0505c6.33dd 2026-11-24 04:34:30 CET 2026-11-24 04:34:30 CET 4 22P02 SELECT client backend 0  [     13277] [[bracket] app, with comma] STATEMENT:  SELECT 'x'::int;
6b0505c6.33df 2026-11-24 04:34:30 CET 2026-11-24 04:34:30 CET 3 28000 startup client backend 0  [     13279] [[unknown] ] FATAL:  role "nobody" does not exist
6b0505c6.33d4 2026-11-24 04:34:30 CET 2026-11-24 04:34:30 CET 1 00000  checkpointer 0  [     13268] LOG:  checkpoint starting: immediate force wait
6b0505c6.33d4 2026-11-24 04:34:30 CET 2026-11-24 04:34:30 CET 2 00000  checkpointer 0  [     13268] DEBUG:  performing replication slot checkpoint
""",  # noqa: E501 - real log lines, as PostgreSQL wrote them
)
