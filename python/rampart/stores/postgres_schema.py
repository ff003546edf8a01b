"""The PostgreSQL store's schema: its tables and the functions that append,
read and compact under the journal's rules (docs/shared.md), as SQL run by
:class:`rampart.stores.postgres.PostgresStore` when it creates what is missing."""

from __future__ import annotations

from rampart.stores.base import AHEAD_LIMIT, SEQ_MAX

__all__ = ["_APPEND_FN", "_CHAIN_FN", "_LOW_FN", "_SCHEMA", "_SCHEMA_READY", "_VISIBLE_FN"]

# Bumped when a function's signature or meaning changes (the older ones stay for
# the version that used them). v2: the garbage rules of docs/shared.md ("Garbage
# in the store"), the same as the SQLite store's. v3: compaction's low-water mark
# and each entry's chain value (docs/shared.md, "No divergence").
_APPEND_FN = "rampart_append_v3"
_VISIBLE_FN = "rampart_visible_v3"
_LOW_FN = "rampart_low_v3"
_CHAIN_FN = "rampart_chain_at_v3"

_SCHEMA = f"""
CREATE TABLE IF NOT EXISTS rampart_registries(
    name TEXT PRIMARY KEY, meta BYTEA NOT NULL, last_seq BIGINT NOT NULL DEFAULT 0);
CREATE TABLE IF NOT EXISTS rampart_journal(
    name TEXT NOT NULL, seq BIGINT NOT NULL, entry BYTEA NOT NULL,
    PRIMARY KEY(name, seq));
CREATE TABLE IF NOT EXISTS rampart_checkpoints(
    name TEXT PRIMARY KEY, seq BIGINT NOT NULL, data BYTEA NOT NULL);

-- Tables an older version made get the low-water mark and the chain column;
-- each registry's mark is where its journal's first real entry shows compaction
-- stopped, never past its checkpoint (which covers what was dropped).
DO $up$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = 'rampart_registries'::regclass
                   AND attname = 'low_seq' AND NOT attisdropped) THEN
        ALTER TABLE rampart_registries ADD COLUMN low_seq BIGINT NOT NULL DEFAULT 0;
        ALTER TABLE rampart_registries ADD COLUMN low_chain BYTEA;
        ALTER TABLE rampart_journal ADD COLUMN IF NOT EXISTS chain BYTEA;
        UPDATE rampart_registries r SET low_seq = GREATEST(0, LEAST(
            COALESCE((SELECT c.seq FROM rampart_checkpoints c WHERE c.name = r.name
                      AND c.seq BETWEEN 0 AND {SEQ_MAX} AND length(c.data) > 0), 0),
            COALESCE((SELECT min(j.seq) FROM rampart_journal j WHERE j.name = r.name
                      AND j.seq >= 1 AND length(j.entry) > 0) - 1, {SEQ_MAX})));
    END IF;
END
$up$;

-- Compaction's low-water mark (0: none, or no such registry): every entry up to
-- it may have been dropped. Never past the valid checkpoint (compaction never
-- sets it there), so a foreign value past it counts only up to it.
CREATE OR REPLACE FUNCTION {_LOW_FN}(p_name TEXT)
RETURNS BIGINT LANGUAGE plpgsql STABLE AS $fn$
DECLARE
    low BIGINT;
    ck BIGINT;
BEGIN
    SELECT r.low_seq INTO low FROM rampart_registries r WHERE r.name = p_name;
    SELECT c.seq INTO ck FROM rampart_checkpoints c
        WHERE c.name = p_name AND c.seq BETWEEN 0 AND {SEQ_MAX} AND length(c.data) > 0;
    IF low IS NULL OR low NOT BETWEEN 0 AND {SEQ_MAX} THEN
        RETURN 0;
    END IF;
    RETURN LEAST(low, COALESCE(ck, 0));
END
$fn$;

-- The chain value the store holds for entry p_seq (NULL: none, or compacted).
CREATE OR REPLACE FUNCTION {_CHAIN_FN}(p_name TEXT, p_seq BIGINT)
RETURNS BYTEA LANGUAGE plpgsql STABLE AS $fn$
DECLARE
    low BIGINT := {_LOW_FN}(p_name);
    got BYTEA;
BEGIN
    IF p_seq <= 0 OR p_seq < low THEN
        RETURN NULL;
    END IF;
    IF p_seq = low THEN
        SELECT r.low_chain INTO got FROM rampart_registries r
            WHERE r.name = p_name AND r.low_seq = low;
        RETURN got;
    END IF;
    SELECT j.chain INTO got FROM rampart_journal j WHERE j.name = p_name AND j.seq = p_seq;
    RETURN got;
END
$fn$;

-- The registry's counter (NULL: no such registry). A damaged one (outside
-- [0, SEQ_MAX]: a foreign write) is 0 for readers and, for an appender, the
-- largest entry or valid checkpoint there is (stores/sqlite.py, _counter).
CREATE OR REPLACE FUNCTION rampart_counter_v2(p_name TEXT, p_appending BOOLEAN)
RETURNS BIGINT LANGUAGE plpgsql STABLE AS $fn$
DECLARE
    raw BIGINT;
    top BIGINT;
    ck BIGINT;
BEGIN
    SELECT r.last_seq INTO raw FROM rampart_registries r WHERE r.name = p_name;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    IF raw BETWEEN 0 AND {SEQ_MAX} THEN
        RETURN raw;
    END IF;
    IF NOT p_appending THEN
        RETURN 0;
    END IF;
    SELECT max(j.seq) INTO top FROM rampart_journal j
        WHERE j.name = p_name AND j.seq BETWEEN 1 AND {SEQ_MAX - AHEAD_LIMIT};
    SELECT c.seq INTO ck FROM rampart_checkpoints c
        WHERE c.name = p_name AND c.seq BETWEEN 0 AND {SEQ_MAX} AND length(c.data) > 0;
    RETURN GREATEST(COALESCE(top, 0), COALESCE(ck, 0));
END
$fn$;

-- p_last extended through the entries that follow it without a gap (64
-- windows of AHEAD_LIMIT at most): in a window, the entries of that run are
-- exactly those whose seq is p_last + their rank.
CREATE OR REPLACE FUNCTION rampart_run_end_v2(p_name TEXT, p_last BIGINT)
RETURNS BIGINT LANGUAGE plpgsql STABLE AS $fn$
DECLARE
    at BIGINT := p_last;
    n BIGINT;
BEGIN
    FOR i IN 1..64 LOOP
        SELECT count(*) INTO n FROM (
            SELECT j.seq, row_number() OVER (ORDER BY j.seq) AS rank
            FROM rampart_journal j
            WHERE j.name = p_name AND j.seq > at AND j.seq <= at + {AHEAD_LIMIT}) t
            WHERE t.seq = at + t.rank;
        at := at + n;
        IF n < {AHEAD_LIMIT} THEN
            RETURN at;
        END IF;
    END LOOP;
    RETURN at;
END
$fn$;

-- How far every reader reads (NULL: no such registry): the counter (0 when it
-- is damaged), extended through the entries that follow it without a gap.
-- STABLE: a caller's one statement reads the counter and the entries from one
-- snapshot. The usual case, no entry right after the counter, is one probe.
CREATE OR REPLACE FUNCTION {_VISIBLE_FN}(p_name TEXT)
RETURNS BIGINT LANGUAGE plpgsql STABLE AS $fn$
DECLARE
    at BIGINT;
BEGIN
    SELECT r.last_seq INTO at FROM rampart_registries r WHERE r.name = p_name;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    IF at NOT BETWEEN 0 AND {SEQ_MAX} THEN
        at := 0;
    END IF;
    -- Readers read on from the low-water mark at least: a replica reaches it
    -- by the checkpoint, whatever compaction left below it.
    at := GREATEST(at, {_LOW_FN}(p_name));
    IF NOT EXISTS (
        SELECT 1 FROM rampart_journal j WHERE j.name = p_name AND j.seq = at + 1
    ) THEN
        RETURN at;
    END IF;
    RETURN rampart_run_end_v2(p_name, at);
END
$fn$;

-- An append (stores/sqlite.py, append, statement for statement): own is the
-- entry's seq, NULL when there is no such registry, -1 when no sequence number
-- is free (counter then says where it stood).
CREATE OR REPLACE FUNCTION {_APPEND_FN}(
    p_name TEXT, p_entry BYTEA, p_after BIGINT,
    OUT own BIGINT, OUT counter BIGINT, OUT seqs BIGINT[], OUT entries BYTEA[],
    OUT chains BYTEA[], OUT low BIGINT, OUT anchor BYTEA)
LANGUAGE plpgsql AS $fn$
DECLARE
    ahead BIGINT;
    top BIGINT;
    fin BIGINT;
    free BOOLEAN := false;
BEGIN
    -- The registry row's lock orders the appenders of this registry; every
    -- statement below takes a new snapshot, so it sees every entry committed
    -- before this one took the lock.
    PERFORM 1 FROM rampart_registries r WHERE r.name = p_name FOR UPDATE;
    IF NOT FOUND THEN
        RETURN;  -- no such registry: the caller says so
    END IF;
    counter := rampart_counter_v2(p_name, true);
    low := {_LOW_FN}(p_name);
    -- Land after whatever a foreign client put just ahead of the counter.
    SELECT max(j.seq) INTO ahead FROM rampart_journal j
        WHERE j.name = p_name AND j.seq > counter AND j.seq <= counter + {AHEAD_LIMIT};
    own := GREATEST(counter, COALESCE(ahead, 0)) + 1;
    -- A run of entries reaching past the window (a counter set back by a
    -- foreign write): jump a window at a time, boundedly.
    FOR i IN 1..64 LOOP
        IF own > {SEQ_MAX} OR NOT EXISTS (
            SELECT 1 FROM rampart_journal j WHERE j.name = p_name AND j.seq = own
        ) THEN
            free := true;
            EXIT;
        END IF;
        SELECT max(j.seq) INTO top FROM rampart_journal j
            WHERE j.name = p_name AND j.seq BETWEEN own AND own + {AHEAD_LIMIT};
        own := top + 1;
    END LOOP;
    IF NOT free OR own > {SEQ_MAX} THEN
        own := -1;
        RETURN;
    END IF;
    -- Where readers can have got to: the entries that run on from the counter
    -- (from entry 1 when it is damaged) without a gap.
    SELECT max(j.seq) INTO fin FROM rampart_journal j
        WHERE j.name = p_name AND j.seq BETWEEN 1 AND counter;
    fin := GREATEST(COALESCE(fin, 0), counter - {AHEAD_LIMIT});
    -- (from the low-water mark at least: nothing is sealed where compaction
    -- dropped entries, a replica that needs them reloads the checkpoint).
    fin := LEAST(fin, rampart_run_end_v2(
        p_name, GREATEST(COALESCE(rampart_counter_v2(p_name, false), 0), low)));
    fin := GREATEST(fin, own - 1 - {64 * AHEAD_LIMIT}, low);
    IF own > fin + 1 THEN
        -- Seal the numbers skipped over with empty entries (every replica skips
        -- them), so that no entry can be slipped in below the counter later.
        INSERT INTO rampart_journal(name, seq, entry)
            SELECT p_name, x, ''::bytea FROM generate_series(fin + 1, own - 1) AS x
            ON CONFLICT DO NOTHING;
    END IF;
    UPDATE rampart_registries r SET last_seq = own WHERE r.name = p_name;
    -- The chain value: a hash of the previous entry's, this seq and the entry.
    INSERT INTO rampart_journal(name, seq, entry, chain) VALUES (p_name, own, p_entry,
        substr(sha256(COALESCE({_CHAIN_FN}(p_name, own - 1), ''::bytea)
                      || int8send(own) || p_entry), 1, 16));
    anchor := {_CHAIN_FN}(p_name, p_after);
    SELECT array_agg(j.seq ORDER BY j.seq), array_agg(j.entry ORDER BY j.seq),
           array_agg(j.chain ORDER BY j.seq)
        INTO seqs, entries, chains
        FROM rampart_journal j WHERE j.name = p_name AND j.seq > p_after AND j.seq <= own;
    PERFORM pg_notify(
        'rampart_' || left(encode(sha256(convert_to(p_name, 'UTF8')), 'hex'), 24), p_name);
END
$fn$;

-- The v2 functions, for a version that still uses them.
CREATE OR REPLACE FUNCTION rampart_visible_v2(p_name TEXT)
RETURNS BIGINT LANGUAGE plpgsql STABLE AS $fn$
DECLARE
    at BIGINT;
BEGIN
    SELECT r.last_seq INTO at FROM rampart_registries r WHERE r.name = p_name;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    IF at NOT BETWEEN 0 AND {SEQ_MAX} THEN
        at := 0;
    END IF;
    IF NOT EXISTS (
        SELECT 1 FROM rampart_journal j WHERE j.name = p_name AND j.seq = at + 1
    ) THEN
        RETURN at;
    END IF;
    RETURN rampart_run_end_v2(p_name, at);
END
$fn$;

CREATE OR REPLACE FUNCTION rampart_append_v2(
    p_name TEXT, p_entry BYTEA, p_after BIGINT,
    OUT own BIGINT, OUT counter BIGINT, OUT seqs BIGINT[], OUT entries BYTEA[])
LANGUAGE plpgsql AS $fn$
DECLARE
    ahead BIGINT;
    top BIGINT;
    fin BIGINT;
    free BOOLEAN := false;
BEGIN
    -- The registry row's lock orders the appenders of this registry; every
    -- statement below takes a new snapshot, so it sees every entry committed
    -- before this one took the lock.
    PERFORM 1 FROM rampart_registries r WHERE r.name = p_name FOR UPDATE;
    IF NOT FOUND THEN
        RETURN;  -- no such registry: the caller says so
    END IF;
    counter := rampart_counter_v2(p_name, true);
    -- Land after whatever a foreign client put just ahead of the counter.
    SELECT max(j.seq) INTO ahead FROM rampart_journal j
        WHERE j.name = p_name AND j.seq > counter AND j.seq <= counter + {AHEAD_LIMIT};
    own := GREATEST(counter, COALESCE(ahead, 0)) + 1;
    -- A run of entries reaching past the window (a counter set back by a
    -- foreign write): jump a window at a time, boundedly.
    FOR i IN 1..64 LOOP
        IF own > {SEQ_MAX} OR NOT EXISTS (
            SELECT 1 FROM rampart_journal j WHERE j.name = p_name AND j.seq = own
        ) THEN
            free := true;
            EXIT;
        END IF;
        SELECT max(j.seq) INTO top FROM rampart_journal j
            WHERE j.name = p_name AND j.seq BETWEEN own AND own + {AHEAD_LIMIT};
        own := top + 1;
    END LOOP;
    IF NOT free OR own > {SEQ_MAX} THEN
        own := -1;
        RETURN;
    END IF;
    -- Where readers can have got to: the entries that run on from the counter
    -- (from entry 1 when it is damaged) without a gap.
    SELECT max(j.seq) INTO fin FROM rampart_journal j
        WHERE j.name = p_name AND j.seq BETWEEN 1 AND counter;
    fin := GREATEST(COALESCE(fin, 0), counter - {AHEAD_LIMIT});
    fin := LEAST(fin, rampart_run_end_v2(p_name, COALESCE(rampart_counter_v2(p_name, false), 0)));
    fin := GREATEST(fin, own - 1 - {64 * AHEAD_LIMIT});
    IF own > fin + 1 THEN
        -- Seal the numbers skipped over with empty entries (every replica skips
        -- them), so that no entry can be slipped in below the counter later.
        INSERT INTO rampart_journal(name, seq, entry)
            SELECT p_name, x, ''::bytea FROM generate_series(fin + 1, own - 1) AS x
            ON CONFLICT DO NOTHING;
    END IF;
    UPDATE rampart_registries r SET last_seq = own WHERE r.name = p_name;
    INSERT INTO rampart_journal(name, seq, entry) VALUES (p_name, own, p_entry);
    SELECT array_agg(j.seq ORDER BY j.seq), array_agg(j.entry ORDER BY j.seq)
        INTO seqs, entries
        FROM rampart_journal j WHERE j.name = p_name AND j.seq > p_after AND j.seq <= own;
    PERFORM pg_notify(
        'rampart_' || left(encode(sha256(convert_to(p_name, 'UTF8')), 'hex'), 24), p_name);
END
$fn$;
"""

_SCHEMA_READY = f"""
SELECT to_regclass('rampart_registries') IS NOT NULL
   AND to_regclass('rampart_journal') IS NOT NULL
   AND to_regclass('rampart_checkpoints') IS NOT NULL
   AND to_regprocedure('{_APPEND_FN}(text,bytea,bigint)') IS NOT NULL
   AND to_regprocedure('{_VISIBLE_FN}(text)') IS NOT NULL
   AND to_regprocedure('{_CHAIN_FN}(text,bigint)') IS NOT NULL
"""
