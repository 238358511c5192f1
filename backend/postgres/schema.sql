-- schema.sql creates the tables and functions of one Backend (Schema and
-- Prefix), idempotently. Migrate runs it in one transaction, under an
-- advisory transaction lock, so that many processes may run it at once.
-- {names} are replaced by quoted identifiers before it runs.
--
-- {lock} holds one row per key whose lock was granted or whose fence was
-- taken within the fence retention: the current holder (token, NULL when
-- free), the largest fence handed out for the key, the lease's end and the
-- holder's last beat with its declared period. The row outlives its
-- grants: it is the key's fence counter, and a release only clears the
-- token (an update in place, without index churn).
--
-- {beat} holds the holders' beats since their grants: the lease's end and
-- the last beat of the holder token, one row per key, written by beats
-- alone, so that a beat takes no row lock that a save, a release or an
-- acquire needs; a row whose token is not the key's holder any more
-- counts for nothing. A lease's end and last beat are the later of the
-- {lock} row's (its grant) and of its {beat} row's (see {lease}). It is
-- UNLOGGED: after a crash it is empty, and the holders that were live look
-- dead two beats after their grants (a take-over, under a new fence),
-- never alive when they are not.
--
-- Row locks are held for one statement each, so waits for them are short;
-- {lock_wait} bounds them (lock_timeout) all the same, so that a statement
-- whose client gave up (the server does not notice at once) cannot grant
-- a lock long after: see the cleanup that follows an unknown outcome.
--
-- {value} holds one row per stored value: its fence, its bytes, and when
-- the store may drop it. Every time is the database's clock.

CREATE TABLE IF NOT EXISTS {lock} (
	namespace  text        NOT NULL,
	key        text        NOT NULL,
	token      text,
	fence      bigint      NOT NULL,
	expires_at timestamptz NOT NULL,
	beat_at    timestamptz NOT NULL,
	beat_every interval    NOT NULL,
	PRIMARY KEY (namespace, key)
);
CREATE INDEX IF NOT EXISTS {lock_expires} ON {lock} (expires_at);

CREATE {persistence} TABLE IF NOT EXISTS {value} (
	namespace text        NOT NULL,
	key       text        NOT NULL,
	fence     bigint      NOT NULL,
	data      bytea       NOT NULL,
	until     timestamptz NOT NULL,
	PRIMARY KEY (namespace, key)
);
CREATE INDEX IF NOT EXISTS {value_until} ON {value} (until);

CREATE UNLOGGED TABLE IF NOT EXISTS {beat} (
	namespace  text        NOT NULL,
	key        text        NOT NULL,
	token      text        NOT NULL,
	expires_at timestamptz NOT NULL,
	beat_at    timestamptz NOT NULL,
	PRIMARY KEY (namespace, key)
);

-- {clock_us} is a time in microseconds since 1970: the lower bound of
-- every fence, so that fences keep growing when the rows that counted
-- them are lost (truncated, or emptied by a crash for an UNLOGGED table).
CREATE OR REPLACE FUNCTION {clock_us}(t timestamptz) RETURNS bigint
LANGUAGE sql IMMUTABLE AS $$ SELECT (extract(epoch FROM t) * 1000000)::bigint $$;

-- {lease} returns the end and the last beat of the lease of p_token on
-- key, whose {lock} row says p_expires and p_beat: the later of those and
-- of its beats in {beat}. It reads {beat} without locking it. (Version 4.)
CREATE OR REPLACE FUNCTION {lease}(p_ns text, p_key text, p_token text,
	p_expires timestamptz, p_beat timestamptz, OUT o_expires timestamptz, OUT o_beat timestamptz)
LANGUAGE plpgsql STABLE AS $$
DECLARE
	b {beat}%ROWTYPE;
BEGIN
	o_expires := p_expires;
	o_beat := p_beat;
	SELECT * INTO b FROM {beat} AS x WHERE x.namespace = p_ns AND x.key = p_key AND x.token = p_token;
	IF FOUND THEN
		o_expires := greatest(p_expires, b.expires_at);
		o_beat := greatest(p_beat, b.beat_at);
	END IF;
END $$;

-- {acquire} takes key's lock for p_token, or takes it over from a holder
-- whose last beat is older than two of its beats. It returns the grant's
-- fence and how: 1 for a free lock, 2 for a take-over; or (0, 0) when a
-- live holder has it. A live holder is first looked for without locking
-- the row: a call that finds one answers at once and holds no row lock
-- until its statement ends, so that the holder's save and beats, and the
-- acquires of other processes, do not queue behind it. (Version 3.)
CREATE OR REPLACE FUNCTION {acquire}(p_ns text, p_key text, p_token text,
	p_lease_us bigint, p_beat_us bigint, OUT o_fence bigint, OUT o_how int)
LANGUAGE plpgsql AS $$
DECLARE
	t   timestamptz;
	cur {lock}%ROWTYPE;
	le  record;
	vf  bigint;
BEGIN
	PERFORM set_config('lock_timeout', {lock_wait}, true);
	SELECT * INTO cur FROM {lock} AS l WHERE l.namespace = p_ns AND l.key = p_key;
	IF FOUND AND cur.token IS NOT NULL THEN
		SELECT * INTO le FROM {lease}(p_ns, p_key, cur.token, cur.expires_at, cur.beat_at);
		t := clock_timestamp();
		IF le.o_expires > t AND le.o_beat + 2 * cur.beat_every >= t THEN
			o_fence := 0;
			o_how := 0;
			RETURN;
		END IF;
	END IF;
	-- The row must exist before it is locked: two first grants of a key
	-- then queue on it instead of both inserting.
	INSERT INTO {lock} AS l (namespace, key, token, fence, expires_at, beat_at, beat_every)
	VALUES (p_ns, p_key, NULL, 0, clock_timestamp(), clock_timestamp(), interval '0')
	ON CONFLICT DO NOTHING;
	SELECT * INTO cur FROM {lock} AS l WHERE l.namespace = p_ns AND l.key = p_key FOR UPDATE;
	t := clock_timestamp();
	o_how := 1;
	IF cur.token IS NOT NULL THEN
		SELECT * INTO le FROM {lease}(p_ns, p_key, cur.token, cur.expires_at, cur.beat_at);
		t := clock_timestamp();
		IF le.o_expires > t THEN
			IF le.o_beat + 2 * cur.beat_every >= t THEN
				o_fence := 0;
				o_how := 0;
				RETURN;
			END IF;
			o_how := 2;
		END IF;
	END IF;
	SELECT v.fence INTO vf FROM {value} AS v WHERE v.namespace = p_ns AND v.key = p_key;
	o_fence := greatest({clock_us}(t), cur.fence + 1, coalesce(vf, 0) + 1);
	UPDATE {lock} AS l SET token = p_token, fence = o_fence,
		expires_at = t + p_lease_us * interval '1 microsecond',
		beat_at = t, beat_every = p_beat_us * interval '1 microsecond'
	WHERE l.namespace = p_ns AND l.key = p_key;
END $$;

-- {acquire_many} runs {acquire} for each (p_ns[i], p_key[i], p_token[i],
-- p_lease_us[i], p_beat_us[i]), in the order of the keys, so that two
-- calls never wait for each other's rows in opposite orders, and returns
-- each one's i, fence and how. Its row locks are held until it ends: the
-- callers keep their batches small. (Version 2.)
CREATE OR REPLACE FUNCTION {acquire_many}(p_ns text[], p_key text[], p_token text[],
	p_lease_us bigint[], p_beat_us bigint[], OUT o_i int, OUT o_fence bigint, OUT o_how int)
RETURNS SETOF record
LANGUAGE plpgsql AS $$
DECLARE
	r record;
BEGIN
	FOR r IN SELECT * FROM unnest(p_ns, p_key, p_token, p_lease_us, p_beat_us)
		WITH ORDINALITY AS u(ns, key, token, lease_us, beat_us, i) ORDER BY u.ns, u.key, u.i
	LOOP
		o_i := r.i;
		SELECT a.o_fence, a.o_how INTO o_fence, o_how
		FROM {acquire}(r.ns, r.key, r.token, r.lease_us, r.beat_us) AS a;
		RETURN NEXT;
	END LOOP;
END $$;

-- {save} writes a value under the fence rule: refused when the stored
-- value (still live) has a larger fence. With p_token it writes only while
-- p_token holds key's lock (-1 otherwise: nothing written, nothing
-- released), and with p_release it then releases the lock and notifies
-- p_channel, whether the fence rule let the write through or not. Returns
-- 1 when stored, 0 when refused.
CREATE OR REPLACE FUNCTION {save}(p_ns text, p_key text, p_fence bigint,
	p_data bytea, p_ttl_us bigint, p_token text, p_release boolean,
	p_channel text, p_payload text) RETURNS int
LANGUAGE plpgsql AS $$
DECLARE
	t      timestamptz := clock_timestamp();
	stored int := 0;
	cur    {lock}%ROWTYPE;
BEGIN
	PERFORM set_config('lock_timeout', {lock_wait}, true);
	IF p_token <> '' THEN
		SELECT * INTO cur FROM {lock} AS l
		WHERE l.namespace = p_ns AND l.key = p_key AND l.token = p_token
		FOR UPDATE;
		IF NOT FOUND OR (cur.expires_at <= t AND
			(SELECT le.o_expires FROM {lease}(p_ns, p_key, p_token, cur.expires_at, cur.beat_at) AS le) <= t) THEN
			RETURN -1;
		END IF;
	END IF;
	IF p_ttl_us > 0 THEN
		INSERT INTO {value} AS v (namespace, key, fence, data, until)
		VALUES (p_ns, p_key, p_fence, p_data, t + p_ttl_us * interval '1 microsecond')
		ON CONFLICT (namespace, key) DO UPDATE
		SET fence = excluded.fence, data = excluded.data, until = excluded.until
		WHERE v.until <= clock_timestamp() OR excluded.fence >= v.fence;
		IF FOUND THEN
			stored := 1;
		END IF;
	END IF;
	IF p_token <> '' AND p_release THEN
		UPDATE {lock} AS l SET token = NULL, expires_at = t
		WHERE l.namespace = p_ns AND l.key = p_key;
		PERFORM pg_notify(p_channel, p_payload);
	END IF;
	RETURN stored;
END $$;

-- {save_many} runs {save} for each i of its arrays, in the order of the
-- keys (as {acquire_many} does), and returns each one's i and result.
-- (Version 2.)
CREATE OR REPLACE FUNCTION {save_many}(p_ns text[], p_key text[], p_fence bigint[],
	p_data bytea[], p_ttl_us bigint[], p_token text[], p_release boolean[],
	p_channel text[], p_payload text[], OUT o_i int, OUT o_n int)
RETURNS SETOF record
LANGUAGE plpgsql AS $$
DECLARE
	r record;
BEGIN
	FOR r IN SELECT * FROM unnest(p_ns, p_key, p_fence, p_data, p_ttl_us, p_token, p_release, p_channel, p_payload)
		WITH ORDINALITY AS u(ns, key, fence, data, ttl_us, token, release, channel, payload, i)
		ORDER BY u.ns, u.key, u.i
	LOOP
		o_i := r.i;
		o_n := {save}(r.ns, r.key, r.fence, r.data, r.ttl_us, r.token, r.release, r.channel, r.payload);
		RETURN NEXT;
	END LOOP;
END $$;

-- {next_fence} hands out a fence above every grant and write of key so
-- far, for a write made without the lock; with p_revoke it also ends the
-- current grant (and wakes key's waiters on p_channel).
CREATE OR REPLACE FUNCTION {next_fence}(p_ns text, p_key text, p_revoke boolean,
	p_channel text, p_payload text) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
	t   timestamptz;
	cur  {lock}%ROWTYPE;
	ends timestamptz;
	vf   bigint;
	f    bigint;
BEGIN
	PERFORM set_config('lock_timeout', {lock_wait}, true);
	INSERT INTO {lock} AS l (namespace, key, token, fence, expires_at, beat_at, beat_every)
	VALUES (p_ns, p_key, NULL, 0, clock_timestamp(), clock_timestamp(), interval '0')
	ON CONFLICT DO NOTHING;
	SELECT * INTO cur FROM {lock} AS l WHERE l.namespace = p_ns AND l.key = p_key FOR UPDATE;
	SELECT le.o_expires INTO ends FROM {lease}(p_ns, p_key, cur.token, cur.expires_at, cur.beat_at) AS le;
	t := clock_timestamp();
	SELECT v.fence INTO vf FROM {value} AS v WHERE v.namespace = p_ns AND v.key = p_key;
	f := greatest({clock_us}(t), cur.fence + 1, coalesce(vf, 0) + 1);
	IF p_revoke OR cur.token IS NULL OR ends <= t THEN
		-- The row's retention counts from its last fence.
		UPDATE {lock} AS l SET fence = f, token = NULL, expires_at = t
		WHERE l.namespace = p_ns AND l.key = p_key;
	ELSE
		UPDATE {lock} AS l SET fence = f WHERE l.namespace = p_ns AND l.key = p_key;
	END IF;
	IF p_revoke AND cur.token IS NOT NULL AND ends > t THEN
		PERFORM pg_notify(p_channel, p_payload);
	END IF;
	RETURN f;
END $$;

-- {extend_many} resets the leases of the holders p_token[i] of the keys
-- (p_ns[i], p_key[i]) to p_ttl_us[i] from now, and records their beats,
-- in {beat}: the beats of one process, in one statement, one key after
-- another in the order of the keys (one index lookup each, whatever the
-- plan: a join planned while the table was empty scans it whole once it
-- is large). It reads {lock} without locking it, so that the holders'
-- saves and releases, and other processes' acquires, never wait for a
-- beat. It returns the i of each lease extended; the others are no
-- longer held. (Version 4.)
CREATE OR REPLACE FUNCTION {extend_many}(p_ns text[], p_key text[],
	p_token text[], p_ttl_us bigint[], OUT o_i int)
RETURNS SETOF int
LANGUAGE plpgsql AS $$
DECLARE
	r   record;
	cur {lock}%ROWTYPE;
	t   timestamptz;
BEGIN
	PERFORM set_config('lock_timeout', {lock_wait}, true);
	FOR r IN SELECT * FROM unnest(p_ns, p_key, p_token, p_ttl_us)
		WITH ORDINALITY AS u(ns, key, token, ttl_us, i) ORDER BY u.ns, u.key, u.i
	LOOP
		SELECT * INTO cur FROM {lock} AS l WHERE l.namespace = r.ns AND l.key = r.key AND l.token = r.token;
		CONTINUE WHEN NOT FOUND;
		t := clock_timestamp();
		CONTINUE WHEN cur.expires_at <= t AND
			(SELECT le.o_expires FROM {lease}(r.ns, r.key, r.token, cur.expires_at, cur.beat_at) AS le) <= t;
		INSERT INTO {beat} AS b (namespace, key, token, expires_at, beat_at)
		VALUES (r.ns, r.key, r.token, t + r.ttl_us * interval '1 microsecond', t)
		ON CONFLICT (namespace, key) DO UPDATE
		SET token = excluded.token, expires_at = excluded.expires_at, beat_at = excluded.beat_at;
		o_i := r.i;
		RETURN NEXT;
	END LOOP;
END $$;

COMMENT ON TABLE {lock} IS {version};
