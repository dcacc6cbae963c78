"""Value removal from the text fields of an entry (message, detail, hint, context): default deny.

The token: a removed value becomes `...` (`TOKEN`). The punctuation PostgreSQL put around the
value stays, so `Key (email)=(bob@example.com) already exists.` becomes
`Key (email)=(...) already exists.` and `invalid input syntax for type integer: "abc"` becomes
`invalid input syntax for type integer: "..."`. Identifiers (table, column, constraint, role,
type, function names), numbers that are server facts (positions, pids, sizes, counts, oids) and
PostgreSQL's own wording stay: they are what makes a line useful and they are not the user's data.

**Default deny.** `redact_text` knows PostgreSQL's messages through `_TEMPLATES`, a table of their
English texts (PostgreSQL 13-18, `lc_messages = 'C'`) in which every variable part is a typed
placeholder: kept when it can only be an identifier, a number or server text, replaced when it is
a value, normalized when it is SQL. A field is read line by line (a template may span lines when
its SQL does); the first line that matches no template is replaced, with the rest of the field,
by one `TOKEN`: the lines after an unknown one are most likely more of the same unknown text (a
RAISE message with newlines, a value with newlines), and reading them as messages could keep a
value that happens to look like one. So the output of RAISE, of extensions and of messages this
table does not know yet never leaves the server. A field longer than 64 KiB is replaced whole:
PostgreSQL's own messages are short (it cuts key values and row values, track_activity_query_size
cuts statements), and it bounds the time a crafted text can cost. Because classification runs on the text
before this step (entry.py), a replaced message still has its kind; and because the grouping of
the API is kind plus value-free message, every template added here turns a `...` group into a
useful one.

Placeholders (`%%` is a literal percent sign):

    %i  text inside double quotes, kept: an identifier ("orders", "shop.public.t", a file path)
    %I  the same where the closing quote ends the line: PostgreSQL prints a name as it is, so a
        name with a double quote in it (`in relation "Tab"le"`) is read up to the line's last quote
    %w  one word, kept: a bare name, a keyword, a lock mode, an auth method (no space or quote)
    %n  a number, kept
    %t  a type name, kept: integer, character varying(10), timestamp with time zone, mood[]
    %f  a function or operator signature, kept: f(integer, text)
    %s  server text without quotes, kept: an OS error, a WAL location, a time, a reason
    %c  a setting's value, kept when it is a number with its unit (250ms, 4GB) or lowercase
        words joined by commas (on, replica, debug1, stderr,csvlog; PG18's log_connections
        receipt,authentication); anything else (a connection string, a path, a key) has a
        template with %v after it
    %v  a value: replaced by TOKEN (within its line)
    %k  an advisory lock's key, the numbers PostgreSQL writes for it (lmgr.c DescribeLockTag,
        `[%u,%u,%u,%u]`): the application's value, replaced by TOKEN; being numbers, it never
        goes on over the next line as a %v may
    %q  SQL: normalized like a statement (literals -> $n), may span lines; a statement that
        does not parse is reduced strictly (normalize.py: its bare words may be data)
    %e  a PL/pgSQL expression or assignment (`x := 5 / 0`), may span lines: its literals -> $n
        by the lexer alone; it never parses as a statement, and its words are the function's code
    %Q  SQL to the end of the field (or to the next `Process N: ` line of a deadlock report)
    %p  a bind parameter list `$1 = '...', $2 = NULL`: each quoted value replaced (within its line)

A value (%v, %p) can hold newlines, which PostgreSQL writes as they are: after a line whose value
ends it (or whose bind parameter's quote is still open), the rest of the field is one `TOKEN`,
never read as more messages.

`scrub_passwords` runs on every field even when the database sends full text: `PASSWORD '...'`
(CREATE/ALTER ROLE, `OPTIONS (password '...')`), `password=...` in connection strings (dblink,
CREATE SUBSCRIPTION ... CONNECTION '...', postgres_fdw) and the password of a
`scheme://user:password@host` URI never leave the server. It runs first in `redact_text` too.
"""

from __future__ import annotations

import re
from typing import Final

from forwarder.pglog.normalize import ends_inside_a_token, normalize, scrub

TOKEN: Final = "..."  # noqa: S105  # the replacement token, not a password

_KEEP: Final = 0
_VALUE: Final = 1
_SQL: Final = 2
_PARAMS: Final = 3
_EXPR: Final = 4
_KEY: Final = 5

# Kept placeholders are bounded: a line that does not match must fail fast, not backtrack through
# every way to split a long line (a value such as ")=()=(" repeated would otherwise make a
# template like `Key (%s)=(%v)` quadratic).
_PLACEHOLDERS: Final[dict[str, tuple[str, int]]] = {
    "i": (r'[^"\n]{0,300}', _KEEP),
    "I": (r"[^\n]{0,300}", _KEEP),
    "w": (r"[^\s\"',()]{1,200}", _KEEP),
    "n": (r"-?\d{1,20}(?:\.\d{1,20})?", _KEEP),
    "t": (r"[\w$.\" \[\]]{1,100}?(?:\(\d{1,10}(?:,\d{1,10})?\))?(?:\[\])*", _KEEP),
    "f": (r"[\w$.\"]{1,200}\([^()'\n]{0,500}\)", _KEEP),
    "s": (r"[^'\"\n]{0,300}?", _KEEP),
    "c": (r"-?\d{1,20}(?:\.\d{1,20})?(?:[a-zA-Z]{1,3})?|[a-z][a-z0-9_]{0,31}(?:,[a-z][a-z0-9_]{0,31}){0,20}", _KEEP),
    "v": (r"[^\n]*?", _VALUE),
    "k": (r"\d{1,10}(?:,\d{1,10}){3}", _KEY),
    "q": (r".*?", _SQL),
    "e": (r".*?", _EXPR),
    "Q": (r".*?(?=\nProcess \d{1,10}: |\Z)", _SQL),
    "p": (r"[^\n]*?", _PARAMS),
}

# The template table. Grouped by where PostgreSQL writes the text (src/backend/...); within a
# first word, earlier templates win, so a kept-token form comes before its %v form.
_TEMPLATES: Final[tuple[str, ...]] = (
    # -- constraint violations: access/nbtree/nbtinsert.c, executor/execMain.c, execIndexing.c,
    #    utils/adt/ri_triggers.c, executor/execPartition.c, commands/tablecmds.c
    'duplicate key value violates unique constraint "%i"',
    "Key (%s)=(%v) already exists.",
    'insert or update on table "%i" violates foreign key constraint "%i"',
    'update or delete on table "%i" violates foreign key constraint "%i" on table "%i"',
    'Key (%s)=(%v) is not present in table "%i".',
    'Key (%s)=(%v) is still referenced from table "%i".',
    'Key is not present in table "%i".',
    'Key is still referenced from table "%i".',
    'null value in column "%i" of relation "%i" violates not-null constraint',
    'null value in column "%i" violates not-null constraint',
    "Failing row contains (%v).",
    'new row for relation "%i" violates check constraint "%i"',
    'new row for relation "%i" violates partition constraint',
    'new row violates check option for view "%i"',
    'new row violates row-level security policy for table "%i"',
    'new row violates row-level security policy "%i" for table "%i"',
    'new row violates row-level security policy (USING expression) for table "%i"',
    'conflicting key value violates exclusion constraint "%i"',
    "Key (%s)=(%v) conflicts with existing key (%s)=(%v).",
    'check constraint "%i" of relation "%i" is violated by some row',
    'column "%i" of relation "%i" contains null values',
    'value for domain %t violates check constraint "%i"',
    "domain %t does not allow null values",
    'no partition of relation "%i" found for row',
    "Partition key of the failing row contains (%v).",
    'could not create unique index "%i"',
    "Key (%s)=(%v) is duplicated.",
    "there is no unique or exclusion constraint matching the ON CONFLICT specification",
    "ON CONFLICT DO UPDATE command cannot affect row a second time",
    "Ensure that no rows proposed for insertion within the same command have duplicate constrained values.",
    'cannot insert a non-DEFAULT value into column "%i"',
    'Column "%i" is an identity column defined as GENERATED ALWAYS.',
    'cannot insert into column "%i"',
    'Column "%i" is a generated column.',
    # -- objects that do not exist or already do: catalog/namespace.c, parser/parse_*.c, ...
    'relation "%i" does not exist',
    'relation "%i" already exists',
    'relation "%i" already exists, skipping',
    'table "%i" does not exist',
    'table "%i" does not exist, skipping',
    'column "%i" of relation "%i" does not exist',
    # A value without its quotes parses as a column reference (`WHERE email = alice`, dynamic SQL
    # built from a parameter): the name of an unknown column may be data (entry.py, 42703).
    'column "%v" does not exist',
    'column "%i" of relation "%i" already exists',
    "column %v does not exist",
    'column reference "%i" is ambiguous',
    'column "%i" specified more than once',
    'column "%i" is of type %t but expression is of type %t',
    'column "%i" cannot be cast automatically to type %t',
    'column "%i" must appear in the GROUP BY clause or be used in an aggregate function',
    'missing FROM-clause entry for table "%i"',
    'invalid reference to FROM-clause entry for table "%i"',
    'table name "%i" specified more than once',
    "function %f does not exist",
    "function %f is not unique",
    "function %f already exists with same argument types",
    "procedure %f does not exist",
    "operator does not exist: %s",
    "operator is not unique: %s",
    'type "%i" does not exist',
    'type "%i" already exists',
    'schema "%i" does not exist',
    'schema "%i" already exists',
    'database "%i" does not exist',
    'database "%i" already exists',
    'role "%i" does not exist',
    'role "%i" already exists',
    'Role "%i" does not exist.',
    'index "%i" does not exist',
    'index "%i" does not exist, skipping',
    'sequence "%i" does not exist',
    'view "%i" does not exist',
    'extension "%i" does not exist',
    'extension "%i" already exists',
    'extension "%i" already exists, skipping',
    'constraint "%i" of relation "%i" does not exist',
    # the NOTICEs of IF [NOT] EXISTS (commands/dropcmds.c does_not_exist_skipping, tablecmds.c
    # DropErrorMsgNonExistent and ALTER TABLE ... IF [NOT] EXISTS, schemacmds.c, user.c, dbcommands.c)
    *(
        f'{what} "%i" does not exist, skipping'
        for what in (
            "schema",
            "type",
            "collation",
            "conversion",
            "text search parser",
            "text search dictionary",
            "text search template",
            "text search configuration",
            "extension",
            "language",
            "event trigger",
            "foreign-data wrapper",
            "server",
            "publication",
            "statistics object",
            "access method",
            "sequence",
            "view",
            "materialized view",
            "foreign table",
            "relation",
            "role",
            "database",
            "tablespace",
        )
    ),
    *(f'{what} "%i" for relation "%i" does not exist, skipping' for what in ("trigger", "policy", "rule")),
    *(f"{what} %f does not exist, skipping" for what in ("function", "procedure", "routine", "aggregate")),
    "operator %s does not exist, skipping",
    "cast from type %t to type %t does not exist, skipping",
    'transform for type %t language "%i" does not exist, skipping',
    'operator class "%i" does not exist for access method "%i", skipping',
    'operator family "%i" does not exist for access method "%i", skipping',
    'user mapping for "%i" does not exist for server "%i", skipping',
    'column "%i" of relation "%i" does not exist, skipping',
    'column "%i" of relation "%i" already exists, skipping',
    'constraint "%i" of relation "%i" does not exist, skipping',
    'schema "%i" already exists, skipping',
    'server "%i" already exists, skipping',
    'user mapping for "%i" already exists for server "%i", skipping',
    'statistics object "%i" already exists, skipping',
    'role "%i" does not exist, skipping',
    'trigger "%i" for table "%i" does not exist',
    'prepared statement "%i" does not exist',
    'prepared statement "%i" already exists',
    "unnamed prepared statement does not exist",
    'cursor "%i" does not exist',
    'cursor "%i" already exists',
    'portal "%i" does not exist',
    'tablespace "%i" does not exist',
    'publication "%i" does not exist',
    'subscription "%i" does not exist',
    'server "%i" does not exist',
    # slot.c (PG13-15, then PG16+ with the cause in a DETAIL): a slot given up
    'invalidating slot "%i" because its restart_lsn %s exceeds max_slot_wal_keep_size',
    'invalidating obsolete replication slot "%i"',
    'terminating process %n to release replication slot "%i"',
    "The slot's restart_lsn %s exceeds the limit by %n bytes.",
    "The slot conflicted with xid horizon %n.",
    "Logical decoding on standby requires wal_level >= logical on the primary server.",
    'Logical decoding on standby requires "wal_level" >= "logical" on the primary server.',
    'The slot\'s idle time of %s exceeds the configured "%i" duration of %s.',
    'You might need to increase "%i".',
    "You might need to increase %w.",
    # log_replication_commands (PG17+ slot.c) and the slot sync worker (PG17+ slotsync.c)
    'acquired logical replication slot "%i"',
    'released logical replication slot "%i"',
    'acquired physical replication slot "%i"',
    'released physical replication slot "%i"',
    "slot sync worker started",
    'replication slot "%i" does not exist',
    'replication slot "%i" already exists',
    'unrecognized configuration parameter "%i"',
    'language "%i" does not exist',
    'collation "%i" for encoding "%i" does not exist',
    'record "%i" is not assigned yet',
    'record "%i" has no field "%i"',
    # -- privileges: catalog/aclchk.c, commands/*.c (PG16+ DETAILs "Only roles with ...")
    "permission denied for table %w",
    "permission denied for relation %w",
    "permission denied for sequence %w",
    "permission denied for schema %w",
    "permission denied for database %w",
    "permission denied for function %w",
    "permission denied for procedure %w",
    "permission denied for routine %w",
    "permission denied for aggregate %w",
    "permission denied for view %w",
    "permission denied for materialized view %w",
    "permission denied for foreign table %w",
    "permission denied for type %w",
    "permission denied for domain %w",
    "permission denied for language %w",
    "permission denied for large object %w",
    "permission denied for tablespace %w",
    "permission denied for foreign-data wrapper %w",
    "permission denied for foreign server %w",
    "permission denied for collation %w",
    "permission denied for conversion %w",
    "permission denied for operator %w",
    "permission denied for operator class %w",
    "permission denied for operator family %w",
    "permission denied for text search dictionary %w",
    "permission denied for text search configuration %w",
    "permission denied for event trigger %w",
    "permission denied for extension %w",
    "permission denied for publication %w",
    "permission denied for subscription %w",
    "permission denied for statistics object %w",
    "permission denied for index %w",
    "permission denied for parameter %w",
    "permission denied for column %w of relation %w",
    "permission denied to %s",
    'permission denied to set parameter "%i"',
    'permission denied for database "%i"',
    "must be owner of table %w",
    "must be owner of relation %w",
    "must be owner of sequence %w",
    "must be owner of schema %w",
    "must be owner of database %w",
    "must be owner of function %w",
    "must be owner of procedure %w",
    "must be owner of routine %w",
    "must be owner of aggregate %w",
    "must be owner of view %w",
    "must be owner of materialized view %w",
    "must be owner of foreign table %w",
    "must be owner of type %w",
    "must be owner of domain %w",
    "must be owner of language %w",
    "must be owner of large object %w",
    "must be owner of tablespace %w",
    "must be owner of foreign-data wrapper %w",
    "must be owner of foreign server %w",
    "must be owner of collation %w",
    "must be owner of conversion %w",
    "must be owner of operator %w",
    "must be owner of operator class %w",
    "must be owner of operator family %w",
    "must be owner of text search dictionary %w",
    "must be owner of text search configuration %w",
    "must be owner of event trigger %w",
    "must be owner of extension %w",
    "must be owner of publication %w",
    "must be owner of subscription %w",
    "must be owner of statistics object %w",
    "must be owner of index %w",
    "must be owner of parameter %w",
    "must be superuser to %s",
    "must be a superuser to %s",
    "must be member of role %s",
    'must be able to SET ROLE "%i"',
    "Only roles with the %w attribute may %s.",
    'Only roles with privileges of the "%i" role may %s.',
    'Only roles with the %w attribute and the %w option on role "%i" may %s.',
    "User does not have CONNECT privilege.",
    "cannot drop %s because other objects depend on it",
    "cannot drop %s because %s requires it",
    "Use DROP ... CASCADE to drop the dependent objects too.",
    # -- syntax and analysis: parser/scan.l, parser/gram.y, parser/parse_*.c
    'syntax error at or near "%v"',
    "syntax error at end of input",
    'unterminated quoted string at or near "%v"',
    'unterminated quoted identifier at or near "%v"',
    'unterminated dollar-quoted string at or near "%v"',
    'unterminated /* comment at or near "%v"',
    'unterminated bit string literal at or near "%v"',
    'unterminated hexadecimal string literal at or near "%v"',
    'trailing junk after numeric literal at or near "%v"',
    'zero-length delimited identifier at or near """"',
    'invalid Unicode escape value at or near "%v"',
    'identifier "%v" will be truncated to "%v"',
    "nonstandard use of %s in a string literal",
    "Use the escape string syntax for %s, e.g., %v.",
    "INSERT has more expressions than target columns",
    "INSERT has more target columns than expressions",
    "each UNION query must have the same number of columns",
    "each %w query must have the same number of columns",
    "subquery in FROM must have an alias",
    "argument of %s must be type %t, not type %t",
    "aggregate functions are not allowed in %s",
    "window functions are not allowed in %s",
    "set-returning functions are not allowed in %s",
    "could not determine data type of parameter $%n",
    "there is no parameter $%n",
    'bind message supplies %n parameters, but prepared statement "%i" requires %n',
    "cannot insert multiple commands into a prepared statement",
    "cannot cast type %t to %t",
    "could not identify an equality operator for type %t",
    "could not identify an ordering operator for type %t",
    "No function matches the given name and argument types. You might need to add explicit type casts.",
    "No operator matches the given name and argument types. You might need to add explicit type casts.",
    "No procedure matches the given name and argument types. You might need to add explicit type casts.",
    "Could not choose a best candidate function. You might need to add explicit type casts.",
    "Could not choose a best candidate operator. You might need to add explicit type casts.",
    'Perhaps you meant to reference the column "%i".',
    'Perhaps you meant to reference the column "%i" or the column "%i".',
    'Perhaps you meant to reference the table alias "%i".',
    'There is a column named "%i" in table "%i", but it cannot be referenced from this part of the query.',
    'There is an entry for table "%i", but it cannot be referenced from this part of the query.',
    "You will need to rewrite or cast the expression.",
    "more than one row returned by a subquery used as an expression",
    "cached plan must not change result type",
    "%s cannot run inside a transaction block",
    "%s can only be used in transaction blocks",
    "cannot execute %s in a read-only transaction",
    "cannot execute %s during recovery",
    # -- values: utils/adt/*.c (datatype input functions), utils/mb/*.c, utils/adt/jsonfuncs.c
    'invalid input syntax for type %t: "%v"',
    'invalid input syntax for %t: "%v"',
    'invalid input value for enum %t: "%v"',
    'malformed array literal: "%v"',
    'malformed range literal: "%v"',
    'malformed record literal: "%v"',
    'malformed multirange literal: "%v"',
    'Array value must start with "{" or dimension information.',
    "Unexpected end of input.",
    'Unexpected "%v" character.',
    "Unexpected array element.",
    "Junk after closing right brace.",
    "Missing left parenthesis.",
    "Missing right parenthesis.",
    "Too many columns.",
    "Too few columns.",
    'value "%v" is out of range for type %t',
    'date/time field value out of range: "%v"',
    'date out of range: "%v"',
    'time zone "%v" not recognized',  # the client's string: AT TIME ZONE 'x', '... x'::timestamptz
    # to_date/to_timestamp/to_char/to_number and the jsonpath .datetime() method:
    # utils/adt/formatting.c (PG13-18). Both quoted parts are the user's: the first is a piece of
    # the input string, the second a field of the format string the query passed (its name comes
    # from PostgreSQL's keyword table, but which one and where is the query's choice, and a later
    # version may echo more of the template), so every quoted part of these messages goes.
    'invalid value "%v" for "%v"',
    'source string too short for "%v" formatting field',
    'value for "%v" in source string is out of range',
    'conflicting values for "%v" field in formatting string',
    'formatting field "%v" is only supported in to_char',
    'invalid input string for "%v"',
    '"%v" is not a number',
    'invalid datetime format separator: "%v"',
    'unmatched format separator "%v"',
    'unmatched format character "%v"',
    'hour "%v" is invalid for the 12-hour clock',
    "Use the 24-hour clock, or give an hour between 1 and 12.",
    "invalid combination of date conventions",
    "Do not mix Gregorian and ISO week date conventions in a formatting template.",
    "This value contradicts a previous setting for the same field type.",
    "The given value did not match any of the allowed values for this field.",
    "Time zone abbreviation is not recognized.",
    "Value must be an integer.",
    "Value must be in the range %n to %n.",
    "Value must be in the range %s.",
    "Field requires %n characters, but only %n remain.",
    "Field requires %n characters, but only %n could be parsed.",
    'If your source string is not fixed-width, try using the "FM" modifier.',
    "cannot calculate day of year without year information",
    "input string is too short for datetime format",
    "trailing characters remain in input string after datetime format",
    "invalid format specification for an interval value",
    "Intervals are not tied to specific calendar dates.",
    "localized string format value too long",
    "datetime format is zoned but not timed",
    "datetime format is not dated and not timed",
    "missing time zone in input string for type %t",
    'datetime format is not recognized: "%v"',
    "Use a datetime template argument to specify the input data format.",
    "invalid Roman numeral",
    "multiple decimal points",
    '"EEEE" must be the last pattern used',
    '"9" must be ahead of "PR"',
    '"0" must be ahead of "PR"',
    'cannot use "V" and decimal point together',
    'cannot use "S" twice',
    'cannot use "S" and "PL"/"MI"/"SG"/"PR" together',
    'cannot use "S" and "MI" together',
    'cannot use "S" and "PL" together',
    'cannot use "S" and "SG" together',
    'cannot use "PR" and "S"/"PL"/"MI"/"SG" together',
    'cannot use "RN" twice',
    'cannot use "EEEE" twice',
    '"EEEE" is incompatible with other formats',
    '"EEEE" may only be used together with digit and decimal point patterns.',
    '"RN" is incompatible with other formats',
    '"RN" may only be used together with "FM".',
    "could not determine which collation to use for %f function",
    "Use the COLLATE clause to set the collation explicitly.",
    "timestamptz out of range",
    "timetz out of range",
    "time out of range",
    'Perhaps you need a different "datestyle" setting.',
    "value too long for type %t",
    "value overflows numeric format",
    "numeric field overflow",
    "A field with precision %n, scale %n must round to an absolute value less than %s.",
    "A field with precision %n, scale %n cannot hold an infinite value.",
    "integer out of range",
    "bigint out of range",
    "smallint out of range",
    "OID out of range",
    "timestamp out of range",
    "date out of range",
    "interval out of range",
    "money out of range",
    "input is out of range",
    "time zone displacement out of range",
    "real out of range",
    "double precision out of range",
    "value out of range: overflow",
    "value out of range: underflow",
    "division by zero",
    "cannot take logarithm of zero",
    "cannot take logarithm of a negative number",
    "cannot take square root of a negative number",
    "array subscript out of range",
    "array size exceeds the maximum allowed (%n)",
    "number of array dimensions (%n) exceeds the maximum allowed (%n)",
    "arrays with differing dimensions are not compatible for concatenation",
    'invalid byte sequence for encoding "%i": %v',
    'character with byte sequence %v in encoding "%i" has no equivalent in encoding "%i"',
    "invalid regular expression: %s",
    "invalid escape string",
    "Escape string must be empty or one character.",
    'invalid hexadecimal digit: "%v"',
    "invalid hexadecimal data: odd number of digits",
    "invalid input syntax for type json",
    "invalid input syntax for type jsonb",
    'Token "%v" is invalid.',
    'Expected JSON value, but found "%v".',
    'Expected ":", but found "%v".',
    'Expected "," or "}", but found "%v".',
    'Expected "," or "]", but found "%v".',
    'Expected string, but found "%v".',
    'Expected string or "}", but found "%v".',
    'Expected array element or "]", but found "%v".',
    'Expected end of input, but found "%v".',
    'Escape sequence "%v" is invalid.',
    "Character with value %v must be escaped.",
    "The input string ended unexpectedly.",
    "unsupported Unicode escape sequence",
    "JSON data, line %n: %v",
    "cannot call %s on a scalar",
    "cannot call %s on an array",
    "cannot get array length of a scalar",
    "cannot extract elements from an object",
    'invalid value for parameter "%i": "%v"',
    'invalid value for parameter "%i": %n',
    '%c is outside the valid range for parameter "%i" (%s)',
    'parameter "%i" requires a %w value',
    'parameter "%i" requires a numeric value',
    "Valid units for this parameter are %s.",
    "Available values: %s.",
    # -- transactions, concurrency, timeouts: tcop/postgres.c, storage/lmgr/*.c, access/heap/*.c,
    #    storage/lmgr/predicate.c
    "current transaction is aborted, commands ignored until end of transaction block",
    "there is no transaction in progress",
    "there is already a transaction in progress",
    "canceling statement due to statement timeout",
    "canceling statement due to lock timeout",
    "canceling statement due to user request",
    "canceling statement due to conflict with recovery",
    "canceling authentication due to timeout",
    "canceling autovacuum task",
    "could not serialize access due to concurrent update",
    "could not serialize access due to concurrent delete",
    "could not serialize access due to read/write dependencies among transactions",
    "Reason code: %s.",
    "The transaction might succeed if retried.",
    'could not obtain lock on row in relation "%i"',
    'could not obtain lock on relation "%i"',
    'could not obtain lock on relation "%i", skipping',
    "tuple concurrently updated",
    "tuple concurrently deleted",
    "tuple to be locked was already moved to another partition due to concurrent update",
    "deadlock detected",
    "Process %n waits for %w on advisory lock [%k]; blocked by process %n.",
    "Process %n waits for %w on %s; blocked by process %n.",
    "Process %n: %Q",
    "See server log for query details.",
    "Process holding the lock: %s. Wait queue: %s.",
    "Processes holding the lock: %s. Wait queue: %s.",
    "process %n still waiting for %w on advisory lock [%k] after %n ms",
    "process %n acquired %w on advisory lock [%k] after %n ms",
    "process %n avoided deadlock for %w on advisory lock [%k] by rearranging queue order after %n ms",
    "process %n detected deadlock while waiting for %w on advisory lock [%k] after %n ms",
    "process %n failed to acquire %w on advisory lock [%k] after %n ms",
    "process %n still waiting for %w on %s after %n ms",
    "process %n acquired %w on %s after %n ms",
    "process %n avoided deadlock for %w on %s by rearranging queue order after %n ms",
    "process %n detected deadlock while waiting for %w on %s after %n ms",
    "process %n failed to acquire %w on %s after %n ms",
    "process %n could not obtain %w on advisory lock [%k]",
    "process %n could not obtain %w on %s",
    "Process holding the lock: %s, Wait queue: %s.",
    "Processes holding the lock: %s, Wait queue: %s.",
    "recovery still waiting after %n ms: %s",
    "recovery finished waiting after %n ms: %s",
    "Conflicting process: %n.",
    "Conflicting processes: %s.",
    "User was holding shared buffer pin for too long.",
    "User was holding a relation lock for too long.",
    "User was or might have been using tablespace that must be dropped.",
    "User query might have needed to see row versions that must be removed.",
    "User was using a logical replication slot that must be invalidated.",
    "User transaction caused buffer deadlock with recovery.",
    "User was connected to a database that must be dropped.",
    "stack depth limit exceeded",
    'Increase the configuration parameter "max_stack_depth" (currently %nkB), after ensuring the '
    "platform's stack depth limit is adequate.",
    "temporary file size exceeds temp_file_limit (%nkB)",
    "out of memory",
    "out of shared memory",
    'Failed on request of size %n in memory context "%i".',
    "Failed on request of size %n.",
    "You might need to increase %s.",
    "You might need to increase max_locks_per_transaction.",
    "You might need to increase max_pred_locks_per_transaction.",
    'could not resize shared memory segment "%i" to %n bytes: %s',
    # -- wraparound: access/transam/varsup.c, multixact.c, commands/vacuum.c (PG13-18 wordings)
    'database "%i" must be vacuumed within %n transactions',
    "database with OID %n must be vacuumed within %n transactions",
    'database "%i" must be vacuumed before %n more MultiXactId is used',
    'database "%i" must be vacuumed before %n more MultiXactIds are used',
    "database with OID %n must be vacuumed before %n more MultiXactId is used",
    "database with OID %n must be vacuumed before %n more MultiXactIds are used",
    'database is not accepting commands to avoid wraparound data loss in database "%i"',
    "database is not accepting commands to avoid wraparound data loss in database with OID %n",
    'database is not accepting commands that assign new transaction IDs to avoid wraparound data loss in database "%i"',
    "database is not accepting commands that assign new transaction IDs to avoid wraparound data loss in "
    "database with OID %n",
    'database is not accepting commands that generate new MultiXactIds to avoid wraparound data loss in database "%i"',
    "database is not accepting commands that generate new MultiXactIds to avoid wraparound data loss in "
    "database with OID %n",
    "oldest xmin is far in the past",
    "oldest multixact is far in the past",
    "To avoid a database shutdown, execute a database-wide VACUUM in that database.",
    "To avoid transaction ID assignment failures, execute a database-wide VACUUM in that database.",
    "To avoid XID assignment failures, execute a database-wide VACUUM in that database.",
    "To avoid MultiXactId assignment failures, execute a database-wide VACUUM in that database.",
    "Execute a database-wide VACUUM in that database.",
    "You might also need to commit or roll back old prepared transactions.",
    "You might also need to commit or roll back old prepared transactions, or drop stale replication slots.",
    "Stop the postmaster and vacuum that database in single-user mode.",
    "Close open transactions soon to avoid wraparound problems.",
    "Close open transactions with multixacts soon to avoid wraparound problems.",
    # -- connections, authentication: postmaster/postmaster.c, libpq/auth.c, libpq/hba.c,
    #    utils/init/postinit.c, tcop/postgres.c, tcop/backend_startup.c
    'password authentication failed for user "%i"',
    '%w authentication failed for user "%i"',
    'OAuth bearer authentication failed for user "%i"',
    '"trust" authentication failed for user "%i"',
    'authentication failed for user "%i": host rejected',
    'authentication failed for user "%i": invalid authentication method',
    'Password does not match for user "%i".',
    # PG18 user.c / crypt.c: MD5 passwords are deprecated
    "setting an MD5-encrypted password",
    "MD5 password support is deprecated and will be removed in a future release of PostgreSQL.",
    "Refer to the PostgreSQL documentation for details about migrating to another password type.",
    'User "%i" has no password assigned.',
    'User "%i" has an expired password.',
    'User "%i" does not have a valid SCRAM secret.',
    'User "%i" has a password that cannot be used with MD5 authentication.',
    'Connection matched pg_hba.conf line %n: "%v"',
    'Connection matched file "%i" line %n: "%v"',
    'no pg_hba.conf entry for host "%s", user "%i", database "%i", %s',
    'no pg_hba.conf entry for replication connection from host "%s", user "%i", %s',
    'pg_hba.conf rejects connection for host "%s", user "%i", database "%i", %s',
    'pg_hba.conf rejects replication connection for host "%s", user "%i", %s',
    'role "%i" is not permitted to log in',
    'database "%i" is not currently accepting connections',
    'database "%i" does not allow connections',
    "sorry, too many clients already",
    "remaining connection slots are reserved for non-replication superuser connections",
    "remaining connection slots are reserved for roles with the %w attribute",
    'remaining connection slots are reserved for roles with privileges of the "%i" role',
    'too many connections for role "%i"',
    'too many connections for database "%i"',
    "the database system is starting up",
    "the database system is shutting down",
    "the database system is in recovery mode",
    "the database system is not yet accepting connections",
    "the database system is not accepting connections",
    "Consistent recovery state has not been yet reached.",
    "Hot standby mode is disabled.",
    "connection to client lost",
    "could not receive data from client: %s",
    "could not send data to client: %s",
    "unexpected EOF on client connection",
    "unexpected EOF on client connection with an open transaction",
    "incomplete startup packet",
    "invalid length of startup packet",
    "unsupported frontend protocol %s: server supports %s",
    "SSL connection has been closed unexpectedly",
    "could not accept SSL connection: %s",
    "terminating connection because protocol synchronization was lost",
    "expected password response, got message type %n",
    "expected SASL response, got message type %n",
    "terminating connection due to administrator command",
    "terminating connection due to conflict with recovery",
    "terminating connection due to idle-in-transaction timeout",
    "terminating connection due to idle-session timeout",
    "terminating connection due to transaction timeout",
    "terminating connection due to unexpected postmaster exit",
    "terminating connection due to immediate shutdown command",
    "terminating connection because of crash of another server process",
    "terminating connection because of unexpected SIGQUIT signal",
    "The postmaster has commanded this server process to roll back the current transaction and exit, "
    "because another server process exited abnormally and possibly corrupted shared memory.",
    "In a moment you should be able to reconnect to the database and repeat your command.",
    "terminating autovacuum process due to administrator command",
    "terminating logical replication worker due to administrator command",
    'terminating background worker "%i" due to administrator command',
    'database "%i" is being accessed by other users',
    'source database "%i" is being accessed by other users',
    "There is %n other session using the database.",
    "There are %n other sessions using the database.",
    "cannot drop the currently open database",
    # -- log_connections / log_disconnections / log_statement / log_duration when their message
    #    is not proven value-free by classify (an unusual statement name). The server's reports
    #    (connections here, checkpoints and temp files below) that classify did not prove keep
    #    their first words only: RAISE LOG can write those words followed by anything.
    "connection received: host=%v",
    "connection received: host=%v port=%n",
    'connection authenticated: identity="%v" method=%w (%v)',
    "connection authorized: %v",
    "replication connection authorized: %v",
    "disconnection: session time: %v",
    "connection ready: %v",
    "duration: %n ms",
    "duration: %n ms  plan:",
    "duration: %n ms  statement",
    "duration: %n ms  %w %s",
    "statement",
    "execute %s",
    # pgaudit's record once classify moved its statement out: the parameters pgaudit.log_parameter
    # logged go; an object name CSV-quoted (a comma or a quote in it) goes with them
    "AUDIT: %w,%n,%n,%w,%s,%s,%s,%v",
    "AUDIT: %w,%n,%n,%w,%s,%s,%v",
    # pg_cron (src/pg_cron.c): a job's start (its command moved out by classify), its result
    # (a command tag and row counts), its failure (the error text is the remote server's: a value)
    "pg_cron scheduler started",
    "cron job %n starting",
    "cron job %n COMMAND completed: %s",
    "cron job %n completed: %n %w",
    "cron job %n failed",
    "cron job %n %v",
    "prepare: %Q",  # postgres.c errdetail_execute: the PREPARE behind an EXECUTE
    "parameters: %p",
    "Parameters: %p",
    "unnamed portal with parameters: %p",
    'portal "%i" with parameters: %p',
    "unnamed portal parameter $%n = %v",
    'portal "%i" parameter $%n = %v',
    "unnamed portal parameter $%n",
    'portal "%i" parameter $%n',
    "extended query with parameters: %p",
    'extended query "%i" with parameters: %p',
    # -- value-free errors of PL/pgSQL and of functions (pl_exec.c, int.c, numeric.c, float.c,
    #    varlena.c, arrayfuncs.c, xml.c, jsonpath_gram.y, jsonfuncs.c, lockfuncs.c, namespace.c)
    "query returned no rows",
    "query returned more than one row",
    "case not found",
    "BY value of FOR loop must be greater than zero",
    "too few arguments for format()",
    "cannot use RETURN QUERY in a non-SETOF function",
    "step size cannot equal zero",
    "factorial of a negative number is undefined",
    "zero raised to a negative power is undefined",
    "field position must not be zero",
    "unequal number of entries in row expressions",
    "non-integer constant in ORDER BY",
    "no schema has been selected to create in",
    "cannot concatenate incompatible arrays",
    "invalid XML content",
    "invalid XML document",
    "invalid XPath expression",
    "syntax error at end of jsonpath input",
    "invalid input syntax for type bytea",
    "cannot set path in scalar",
    "cannot get array length of a non-array",
    "assertion failed",
    "you don't own a lock of type %w",
    'text search configuration "%i" does not exist',
    'text search dictionary "%i" does not exist',
    "Value exceeds integer range.",
    "Use OVERRIDING SYSTEM VALUE to override.",
    "COPY FROM instructs the PostgreSQL server process to read a file. You may want a client-side facility such as"
    " psql's \\copy.",
    "COPY TO instructs the PostgreSQL server process to write a file. You may want a client-side facility such as"
    " psql's \\copy.",
    # -- CONTEXT lines: pl/plpgsql/src/pl_exec.c, pl_comp.c, executor/functions.c, spi.c,
    #    commands/copyfromparse.c, access/heap/heapam.c, executor/execReplication.c, vacuumlazy.c
    "PL/pgSQL function %s line %n at %s",
    "PL/pgSQL function %s while storing call arguments into local variables",
    "PL/pgSQL function %s during function exit",
    "PL/pgSQL function %s during statement block local variable initialization",
    "PL/pgSQL function %s during statement block entry",
    "PL/pgSQL function %s during statement block exit",
    "PL/pgSQL function %s during exception cleanup",
    "PL/pgSQL function %s",
    'compilation of PL/pgSQL function "%i" near line %n',
    'SQL statement "%q"',
    'SQL expression "%e"',
    'PL/pgSQL expression "%e"',
    'PL/pgSQL assignment "%e"',
    'SQL function "%i" statement %n',
    'SQL function "%i" during startup',
    'SQL function "%i" during inlining',
    'SQL function "%i"',
    # -- COPY FROM data errors: commands/copyfromparse.c (the row itself is in CONTEXT, below)
    "extra data after last expected column",
    'missing data for column "%i"',
    "unterminated CSV quoted field",
    "literal carriage return found in data",
    "literal newline found in data",
    "end-of-copy marker corrupt",
    "row field count is %n, expected %n",
    "COPY %w, line %n, column %w: %v",
    "COPY %w, line %n: %v",
    "COPY %w, line %n",
    'while inserting index tuple (%s) in relation "%I"',
    'while updating tuple (%s) in relation "%I"',
    'while deleting tuple (%s) in relation "%I"',
    'while locking tuple (%s) in relation "%I"',
    'while locking updated version (%s) of tuple (%s) in relation "%I"',
    'while checking uniqueness of tuple (%s) in relation "%I"',
    'while checking exclusion constraint on tuple (%s) in relation "%I"',
    'while rechecking updated tuple (%s) in relation "%I"',
    'while scanning block %n of relation "%i"',
    'while scanning block %n offset %n of relation "%i"',
    'while scanning relation "%i"',
    'while vacuuming block %n of relation "%i"',
    'while vacuuming block %n offset %n of relation "%i"',
    'while vacuuming relation "%i"',
    'while vacuuming index "%i" of relation "%i"',
    'while cleaning up index "%i" of relation "%i"',
    'while truncating relation "%i" to %n blocks',
    'automatic vacuum of table "%i"',
    'automatic analyze of table "%i"',
    "parallel worker",
    "external parameter $%n",
    'referential integrity query on "%i" from constraint "%i" on "%i" gave unexpected result',
    "Failed process was running: %Q",
    # -- server life: postmaster/postmaster.c, access/transam/xlog*.c, utils/misc/guc*.c,
    #    postmaster/checkpointer.c, replication/*.c
    "starting PostgreSQL %s",
    'listening on IPv4 address "%i", port %n',
    'listening on IPv6 address "%i", port %n',
    'listening on Unix socket "%i"',
    'could not bind %w address "%i": %s',
    "Is another postmaster already running on port %n? If not, wait a few seconds and retry.",
    'could not create listen socket for "%i"',
    "could not create any TCP/IP sockets",
    "redirecting log output to logging collector process",
    'Future log output will appear in directory "%i".',
    "ending log output to stderr",
    'Future log output will go to log destination "%i".',
    "database system is ready to accept connections",
    "database system is ready to accept read-only connections",
    "database system was shut down at %s",
    "database system was shut down in recovery at %s",
    "database system was interrupted; last known up at %s",
    "database system was interrupted while in recovery at %s",
    "database system was interrupted while in recovery at log time %s",
    "database system was not properly shut down; automatic recovery in progress",
    "This probably means that some data is corrupted and you will have to use the last backup for recovery.",
    "If this has occurred more than once some data might be corrupted and you might need to choose an "
    "earlier recovery target.",
    "database system is shut down",
    "received fast shutdown request",
    "received smart shutdown request",
    "received immediate shutdown request",
    "aborting any active transactions",
    "shutting down",
    'background worker "%i" (PID %n) exited with exit code %n',
    'background worker "%i" (PID %n) was terminated by signal %n: %s',
    'background worker "%i": %s',
    "logical replication launcher started",
    "autovacuum launcher started",
    "autovacuum launcher shutting down",
    "logical replication launcher shutting down",
    "received SIGHUP, reloading configuration files",
    # A custom setting (an extension's or the application's: "myapp.api_key") may hold anything,
    # a key that looks like one lowercase word included: its value goes unless it is a number
    # (auto_explain.log_min_duration = 250). Core settings have no dot.
    'parameter "%w.%w" changed to "%n"',
    'parameter "%w.%w" changed to "%v"',
    'parameter "%i" changed to "%c"',
    'parameter "%i" changed to "%v"',
    'parameter "%i" removed from configuration file, reset to default',
    'parameter "%i" cannot be changed without restarting the server',
    'parameter "%i" cannot be changed now',
    'configuration file "%i" contains errors; unaffected changes were applied',
    'configuration file "%i" contains errors; no changes were applied',
    'configuration file "%i" contains errors',
    'syntax error in file "%i" line %n, near token "%v"',
    'syntax error in file "%i" line %n, near end of line',
    "server process (PID %n) was terminated by signal %n: %s",
    "server process (PID %n) exited with exit code %n",
    "server process (PID %n) was terminated by exception %s",
    "%s process (PID %n) was terminated by signal %n: %s",
    "%s process (PID %n) exited with exit code %n",
    # PG18 names the process by its type (postmaster.c LogChildExit with GetBackendTypeDesc):
    # "client backend (PID 4838) was terminated by signal 9: Killed", "checkpointer (PID 71) ..."
    "%s (PID %n) was terminated by signal %n: %s",
    "%s (PID %n) exited with exit code %n",
    "%s (PID %n) was terminated by exception %s",
    "%s (PID %n) exited with unrecognized status %n",
    "terminating any other active server processes",
    "all server processes terminated; reinitializing",
    "database system shutdown was interrupted; last known up at %s",
    # xlogrecovery.c (PG15+): a restore from a base backup
    "starting backup recovery with redo LSN %s, checkpoint LSN %s, on timeline ID %n",
    "completed backup recovery with redo LSN %s and end LSN %s",
    "MultiXact member wraparound protections are now enabled",
    "MultiXact member wraparound protections are disabled because oldest checkpointed MultiXact %n does not exist"
    " on disk",
    "resetting unlogged relations (init), elapsed time: %s, current path: %s",
    "autovacuum not started because of misconfiguration",
    "terminating walreceiver process due to administrator command",
    "terminating walsender process due to replication timeout",
    "%s process (PID %n) exited with unrecognized status %n",
    "shutting down because restart_after_crash is off",
    'shutting down because "restart_after_crash" is off',
    "shutting down due to startup process failure",
    "abnormal database system shutdown",
    "issuing SIGKILL to recalcitrant children",
    'lock file "%i" already exists',
    "pre-existing shared memory block (key %n, ID %n) is still in use",
    'data directory "%i" has invalid permissions',
    "database files are incompatible with server",
    "starting archive recovery",
    "starting point-in-time recovery to %s",
    "database system is ready to accept read only connections",
    "received promote request",
    "promote trigger file found: %s",
    "recovery stopping before commit of transaction %n, time %s",
    "recovery stopping after commit of transaction %n, time %s",
    "recovery stopping before abort of transaction %n, time %s",
    "recovery stopping after abort of transaction %n, time %s",
    "recovery has paused",
    "pausing at the end of recovery",
    "archive_mode enabled, yet archive_command is not set",
    "archive_mode enabled, yet archiving is not configured",
    'restarting archiver process because value of "%i" was changed',
    'unrecognized configuration parameter "%i" in file "%i" line %n',
    "pg_hba.conf was not reloaded",
    "pg_ident.conf was not reloaded",
    "could not receive data from WAL stream: %s",
    'skipping "%i" --- only table or database owner can vacuum it',
    'skipping "%i" --- only superuser can vacuum it',
    'skipping "%i" --- only superuser or database owner can vacuum it',
    'permission denied to vacuum "%i", skipping it',
    "redo starts at %s",
    "redo done at %s",
    "redo is not required",
    "redo in progress, elapsed time: %s",
    "invalid record length at %s",
    "invalid resource manager ID %n at %s",
    "record with incorrect prev-link %s at %s",
    "invalid magic number %s in %s",
    "checkpoint starting: %v",
    "checkpoint complete: %v",
    "restartpoint starting: %v",
    "restartpoint complete: %v",
    "recovery restart point at %v",
    "Last completed transaction was at log time %s.",
    "checkpoints are occurring too frequently (%n seconds apart)",
    "checkpoints are occurring too frequently (%n second apart)",
    'Consider increasing the configuration parameter "%i".',
    "entering standby mode",
    "consistent recovery state reached at %s",
    "started streaming WAL from primary at %s on timeline %n",
    "replication terminated by primary server",
    "End of WAL reached on timeline %n at %s.",
    "fetching timeline history file for timeline %n from primary server",
    "selected new timeline ID: %n",
    "archive recovery complete",
    "last completed transaction was at log time %s",
    "waiting for WAL to become available at %s",
    'restored log file "%i" from archive',
    "could not connect to the primary server: %v",
    "archive command failed with exit code %n",
    "The failed archive command was: %v",
    'archiving write-ahead log file "%i" failed too many times, will try again later',
    "logical decoding found consistent point at %s",
    "logical decoding found initial starting point at %s",
    "There are no running transactions.",
    'starting logical decoding for slot "%i"',
    "Streaming transactions committing after %s, reading WAL from %s.",
    'logical replication apply worker for subscription "%i" has started',
    'logical replication table synchronization worker for subscription "%i", table "%i" has started',
    'logical replication table synchronization worker for subscription "%i", table "%i" has finished',
    "syncing data directory (%s), elapsed time: %s",
    'temporary file: path "%v", size %n',
    'skipping vacuum of "%i" --- lock not available',
    'skipping analyze of "%i" --- lock not available',
    'skipping vacuum of "%i" --- relation no longer exists',
    'skipping analyze of "%i" --- relation no longer exists',
    # -- files and storage: storage/file/fd.c, storage/smgr/md.c, access/transam/*.c
    'could not open file "%i": %s',
    'could not open file "%v" for reading: %s',  # COPY ... FROM 'file', pg_read_file('file'): the client's path
    'could not open file "%v" for writing: %s',
    # contrib: dblink's and postgres_fdw's failed connections (their DETAIL is libpq's text)
    "could not establish connection",
    'could not connect to server "%i"',
    "while executing query on unnamed dblink connection",
    'while executing query on dblink connection named "%i"',
    "while opening cursor on unnamed dblink connection",
    'could not read file "%i": %s',
    'could not write to file "%i": %s',
    'could not extend file "%i": %s',
    'could not extend file "%i": wrote only %n of %n bytes at block %n',
    'could not fsync file "%i": %s',
    'could not stat file "%i": %s',
    'could not remove file "%i": %s',
    'could not rename file "%i" to "%i": %s',
    'could not create directory "%i": %s',
    'could not open directory "%i": %s',
    'could not read block %n in file "%i": %s',
    'could not read block %n in file "%i": read only %n of %n bytes',
    'could not write block %n in file "%i": %s',
    "Check free disk space.",
    "invalid page in block %n of relation %s",
    'index "%i" contains unexpected zero page at block %n',
    "Please REINDEX it.",
    'index "%i" contains corrupted page at block %n',
    "could not access status of transaction %n",
    'Could not open file "%i": %s.',
    'Could not read from file "%i" at offset %n: %s.',
    "could not fork new process for connection: %s",
    "could not fork autovacuum worker process: %s",
    "could not fork worker process: %s",
    "out of background worker slots",
    'You might need to increase "max_worker_processes".',
    # -- replication/logical/worker.c apply_error_callback: the CONTEXT of a logical replication
    #    apply worker's error (PG14 without the origin; PG15+ with it, "message type" and the
    #    transaction's finish LSN): names, a transaction ID and an LSN
    *(
        f"{start}{target}{transaction}"
        for start in (
            'processing remote data for replication origin "%i" during message type "%i"',
            'processing remote data for replication origin "%i" during "%i"',
            'processing remote data during "%i"',
        )
        for target in ("", ' for replication target relation "%i"', ' for replication target relation "%i" column "%i"')
        for transaction in (
            "",
            " in transaction %n",
            " in transaction %n, finished at %s",
            " in transaction %n finished at %s",
        )
    ),
    'conflict detected on relation "%i": conflict=%w',  # PG18; its DETAIL holds the rows' values
)


class _Template:
    """One compiled template: a regex anchored at a line start and the action of each group."""

    __slots__ = ("actions", "needle", "regex")

    def __init__(self, text: str) -> None:
        parts = re.split(r"%([a-zIQ%])", text)
        # Its longest literal text: a line without it cannot match (checked before the regex for
        # the templates that start with a placeholder, which every unknown line would try).
        self.needle = max(parts[0::2], key=len)
        pattern: list[str] = []
        actions: list[int] = []
        for i, part in enumerate(parts):
            if i % 2 == 0:
                pattern.append(re.escape(part))
            elif part == "%":
                pattern.append("%")
            else:
                sub, action = _PLACEHOLDERS[part]
                if action == _KEEP:
                    pattern.append(f"(?:{sub})")
                else:
                    pattern.append(f"({sub})")
                    actions.append(action)
        # Ends where a line ends: a value (%v, %q) may hold newlines, so the match can span lines.
        pattern.append(r"(?=\n|\Z)")
        self.regex = re.compile("".join(pattern), re.DOTALL)
        self.actions = tuple(actions)


def _build(templates: tuple[str, ...]) -> tuple[dict[str, tuple[_Template, ...]], tuple[_Template, ...]]:
    """Templates indexed by their first word; those that start with a placeholder go apart."""
    by_word: dict[str, list[_Template]] = {}
    rest: list[_Template] = []
    for text in templates:
        word = text.split(" ", 1)[0]
        if "%" in word:
            rest.append(_Template(text))
        else:
            by_word.setdefault(word, []).append(_Template(text))
    return {k: tuple(v) for k, v in by_word.items()}, tuple(rest)


_BY_WORD, _ANY_WORD = _build(_TEMPLATES)

# A bind parameter list: every quoted value goes (log_parameter_max_length's cut values end in
# `...'`, and a list cut by the entry cap may lack its closing quote); the rest must then be
# exactly `$n = '...'` / `$n = NULL` items, or the whole list goes.
_PARAM_VALUE: Final = re.compile(r"'(?:[^']|'')*+(?:'|\Z)")
_PARAM_LIST: Final = re.compile(r"\$\d+ = (?:NULL|'\.\.\.')(?:, \$\d+ = (?:NULL|'\.\.\.'))*")


def _params(text: str) -> tuple[str, bool]:
    if text == TOKEN:
        return text, False
    out = _PARAM_VALUE.sub(f"'{TOKEN}'", text)
    if _PARAM_LIST.fullmatch(out) is None:
        return TOKEN, True
    return out, out != text


_MAX_TEXT: Final = 64 * 1024
# Texts that came out unchanged (value-free messages such as "canceling statement due to
# statement timeout" or "See server log for query details.") repeat all day: remembered, they
# cost a dictionary lookup. Bounded by clearing; a text with values is never remembered.
_CLEAN: Final[set[str]] = set()
_CLEAN_MAX: Final = 4096


def redact_text(text: str) -> tuple[str, bool]:
    """`text` with values (and passwords) replaced by `TOKEN`, and whether anything was replaced.

    Default deny: from the first line that matches no template of `_TEMPLATES`, the text is
    replaced by one `TOKEN`.
    """
    if text in _CLEAN:
        return text, False
    out, changed = _redact(text)
    if not changed and len(text) < 1000:
        if len(_CLEAN) >= _CLEAN_MAX:
            _CLEAN.clear()
        _CLEAN.add(text)
    return out, changed


def _redact(text: str) -> tuple[str, bool]:
    if len(text) > _MAX_TEXT:
        return TOKEN, True
    text, changed = scrub_passwords(text)
    out: list[str] = []
    n = len(text)
    pos = 0
    by_word = _BY_WORD
    while True:
        nl = text.find("\n", pos)
        eol = n if nl < 0 else nl
        if pos == eol:
            out.append("")  # an empty line carries nothing
            end = eol
        else:
            sp = text.find(" ", pos, eol)
            m = None
            template: _Template | None = None
            for template in by_word.get(text[pos : eol if sp < 0 else sp], ()):
                m = template.regex.match(text, pos)
                if m is not None:
                    break
            if m is None:
                for template in _ANY_WORD:
                    if text.find(template.needle, pos) >= 0 and (m := template.regex.match(text, pos)) is not None:
                        break
            if m is None or template is None:
                # Unknown: this line and the rest of the field go. (TOKEN alone is what an earlier
                # pass left: idempotence.)
                out.append(TOKEN)
                return "\n".join(out), changed or text[pos:] != TOKEN
            end = m.end()
            if not template.actions:
                out.append(text[pos:end])
            else:
                pieces: list[str] = []
                last = pos
                spills = False
                for group, action in enumerate(template.actions, 1):
                    start, stop = m.span(group)
                    pieces.append(text[last:start])
                    value = text[start:stop]
                    if action == _KEY:
                        pieces.append(TOKEN)
                        changed = True
                    elif action == _VALUE:
                        pieces.append(TOKEN)
                        changed = changed or value != TOKEN
                        # PostgreSQL writes a value as it is, newlines and the template's own
                        # words included (`Key (e)=(x) already exists.<newline>...`): the lines
                        # after a line that holds one may be more of it.
                        spills = True
                    else:
                        if action in (_SQL, _EXPR):
                            repl, replaced = normalize(value) if action == _SQL else scrub(value)
                            # SQL quoted in a message ends at a quote that may be a literal's
                            # (`SQL statement "INSERT ... 'He said "hi<newline>...`): cut inside a
                            # string, quoted name, dollar quote or comment, it was cut short.
                            spills = spills or ends_inside_a_token(value)
                        else:
                            repl, replaced = _params(value)
                            spills = spills or value.replace("''", "").count("'") % 2 == 1
                        pieces.append(repl)
                        changed = changed or replaced
                    last = stop
                pieces.append(text[last:end])
                out.append("".join(pieces))
                if spills and end < n:
                    # The value may go on over the next lines (PostgreSQL writes a value's newlines
                    # as they are, and its quotes unescaped): none of them is read as a message.
                    out.append(TOKEN)
                    return "\n".join(out), True
        if end >= n:
            break
        pos = end + 1
    return "\n".join(out), changed


_AT_CHARACTER: Final = " at character "


def redact_message(message: str) -> tuple[str, bool]:
    """`redact_text` for a message, keeping PostgreSQL's ` at character N` suffix (elog.c) apart."""
    i = message.rfind(_AT_CHARACTER)
    if i > 0 and message[i + 14 :].isdigit():
        out, changed = redact_text(message[:i])
        return out + message[i:], changed
    return redact_text(message)


# PASSWORD '..' in every form a client can write it (PostgreSQL's lexer, scan.l): the keyword or
# the quoted option name "password", right before the quote or after comments (block comments
# nest: one that opens another takes all the rest, as re cannot count them), an E'' string with backslash
# escapes, a U&'' or plain string, a dollar quote, and strings that follow it ('a'<newline>'b' is
# one literal; on one line it is a syntax error, echoed in the error's STATEMENT all the same).
_SQL_GAP: Final = r"(?:\s|/\*.*?\*/|--[^\n]*(?:\n|\Z))+"
# (a backslash escapes a quote in any string: standard_conforming_strings may be off, see normalize.py)
_SQL_STRING: Final = r"(?:[eE]?'(?:[^'\\]|\\.|'')*+\\?|[uU]&'(?:[^']|'')*+)(?:'|\Z)"
_PASSWORD: Final = re.compile(
    rf"""
      ((?:\bpassword|"password")(?:{_SQL_GAP})?)                                   # PASSWORD '..'
        (?:{_SQL_STRING}(?:\s*{_SQL_STRING})*|\$(\w*)\$.*?(?:\$\2\$|\Z)
          |/\*(?:[^*]|\*(?!/))*?/\*.*)  # a comment holding another (they nest): all the rest
    | (\bpassword\s*=\s*)(?:''(?:[^']|'''')*(?:''|\Z)|'(?:[^'\\]|\\.)*(?:'|\Z)|[^\s'"),]+)  # conninfo password=
    | (\b[A-Za-z][\w+.-]*://[^\s:/@'"]*:)[^\s@'"]+(@)                              # scheme://user:pw@host
    """,
    re.VERBOSE | re.DOTALL | re.IGNORECASE,
)


def _password_repl(m: re.Match[str]) -> str:
    if m.group(1) is not None:
        return f"{m.group(1)}'{TOKEN}'"
    if m.group(3) is not None:
        return f"{m.group(3)}{TOKEN}"
    return f"{m.group(4)}{TOKEN}{m.group(5)}"


def scrub_passwords(text: str) -> tuple[str, bool]:
    """`text` with passwords removed (applied even with full text on), and whether any was found."""
    if "assword" not in text and "ASSWORD" not in text and "://" not in text:
        return text, False
    out = _PASSWORD.sub(_password_repl, text)
    return out, out != text
