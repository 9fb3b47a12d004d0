package session

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// RedisConfig configures the Redis store.
type RedisConfig struct {
	// URL is redis://[user:password@]host:port/db (REDIS_URL). Required.
	URL string
	// KeyPrefix is put before every key; default "" keeps the documented
	// "session:{thread}" names. Tests set a unique prefix.
	KeyPrefix string
	Options
}

// Redis keeps sessions in Redis:
//
//	{prefix}session:{thread}          list of turns (JSON), oldest first
//	{prefix}session:{thread}:ids      sorted set of appended ids (idempotency)
//	{prefix}session:{thread}:summary  string, the folded summary
//	{prefix}episodes:{thread}         hash id -> episode (JSON)
//	{prefix}episodes:{thread}:exp     sorted set id -> expiry (unix ms)
//
// Appends and folds are Lua scripts, so concurrent workers never lose a turn.
type Redis struct {
	rdb    *redis.Client
	prefix string
	opt    Options
}

// NewRedis connects to cfg.URL and pings it.
func NewRedis(ctx context.Context, cfg RedisConfig) (*Redis, error) {
	cfg.setDefaults()
	o, err := redis.ParseURL(cfg.URL)
	if err != nil {
		return nil, fmt.Errorf("REDIS_URL: %w", err)
	}
	o.MaxRetries = 1
	o.DialTimeout = 2 * time.Second
	o.ReadTimeout = 2 * time.Second
	o.WriteTimeout = 2 * time.Second
	rdb := redis.NewClient(o)
	if err := rdb.Ping(ctx).Err(); err != nil {
		_ = rdb.Close()
		return nil, fmt.Errorf("redis %s: %w", o.Addr, err)
	}
	return &Redis{rdb: rdb, prefix: cfg.KeyPrefix, opt: cfg.Options}, nil
}

// Client is the underlying client (benchmarks compare against it).
func (r *Redis) Client() *redis.Client { return r.rdb }

// Close closes the client.
func (r *Redis) Close() error { return r.rdb.Close() }

// Ping checks the server, for readiness checks.
func (r *Redis) Ping(ctx context.Context) error { return r.rdb.Ping(ctx).Err() }

func (r *Redis) keys(thread string) (list, ids, summary string) {
	k := r.prefix + "session:" + thread
	return k, k + ":ids", k + ":summary"
}

var appendScript = redis.NewScript(`
if redis.call('ZSCORE', KEYS[2], ARGV[1]) then return 0 end
redis.call('RPUSH', KEYS[1], ARGV[2])
redis.call('LTRIM', KEYS[1], -tonumber(ARGV[3]), -1)
redis.call('ZADD', KEYS[2], ARGV[5], ARGV[1])
redis.call('ZREMRANGEBYRANK', KEYS[2], 0, -tonumber(ARGV[6]) - 1)
redis.call('PEXPIRE', KEYS[1], ARGV[4])
redis.call('PEXPIRE', KEYS[2], ARGV[4])
redis.call('PEXPIRE', KEYS[3], ARGV[4])
return 1
`)

// Append implements Store.
func (r *Redis) Append(ctx context.Context, thread string, t Turn) (bool, error) {
	if thread == "" {
		return false, ErrNoThread
	}
	b, err := json.Marshal(t)
	if err != nil {
		return false, err
	}
	list, ids, sum := r.keys(thread)
	n, err := appendScript.Run(ctx, r.rdb, []string{list, ids, sum},
		t.ID, b, r.opt.MaxTurns, r.opt.TTL.Milliseconds(), time.Now().UnixMilli(), r.opt.MaxSeen).Int()
	if err != nil {
		return false, fmt.Errorf("append turn %s to session %s: %w", t.ID, thread, err)
	}
	return n == 1, nil
}

// Load implements Store.
func (r *Redis) Load(ctx context.Context, thread string) (Session, error) {
	s := Session{Thread: thread}
	if thread == "" {
		return s, ErrNoThread
	}
	list, _, sum := r.keys(thread)
	var lr *redis.StringSliceCmd
	var sr *redis.StringCmd
	_, err := r.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		lr = p.LRange(ctx, list, 0, -1)
		sr = p.Get(ctx, sum)
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return s, fmt.Errorf("load session %s: %w", thread, err)
	}
	s.Summary = sr.Val()
	for i, raw := range lr.Val() {
		var t Turn
		if err := json.Unmarshal([]byte(raw), &t); err != nil {
			return s, fmt.Errorf("load session %s: turn %d: %w", thread, i, err)
		}
		s.Turns = append(s.Turns, t)
	}
	return s, nil
}

var foldScript = redis.NewScript(`
local raw = redis.call('LINDEX', KEYS[1], tonumber(ARGV[1]) - 1)
if not raw then return 0 end
if cjson.decode(raw).id ~= ARGV[2] then return 0 end
redis.call('LTRIM', KEYS[1], tonumber(ARGV[1]), -1)
redis.call('SET', KEYS[2], ARGV[3], 'PX', ARGV[4])
return 1
`)

// Fold implements Store.
func (r *Redis) Fold(ctx context.Context, thread string, n int, lastID, summary string) (bool, error) {
	if thread == "" {
		return false, ErrNoThread
	}
	if n <= 0 {
		return false, nil
	}
	list, _, sum := r.keys(thread)
	ok, err := foldScript.Run(ctx, r.rdb, []string{list, sum}, n, lastID, summary, r.opt.TTL.Milliseconds()).Int()
	if err != nil {
		return false, fmt.Errorf("fold %d turns of session %s: %w", n, thread, err)
	}
	return ok == 1, nil
}

func (r *Redis) episodeKeys(thread string) (hash, exp string) {
	k := r.prefix + "episodes:" + thread
	return k, k + ":exp"
}

var putEpisodeScript = redis.NewScript(`
local old = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', ARGV[4])
for _, id in ipairs(old) do redis.call('HDEL', KEYS[1], id) end
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', ARGV[4])
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
redis.call('ZADD', KEYS[2], ARGV[3], ARGV[1])
local last = redis.call('ZRANGE', KEYS[2], -1, -1, 'WITHSCORES')
redis.call('PEXPIREAT', KEYS[1], last[2])
redis.call('PEXPIREAT', KEYS[2], last[2])
return 1
`)

// PutEpisode implements Store.
func (r *Redis) PutEpisode(ctx context.Context, thread string, e Episode) error {
	if thread == "" {
		return ErrNoThread
	}
	now := time.Now()
	clampExpiry(&e, now, r.opt.MaxEpisodeTTL)
	b, err := json.Marshal(e)
	if err != nil {
		return err
	}
	h, x := r.episodeKeys(thread)
	if err := putEpisodeScript.Run(ctx, r.rdb, []string{h, x}, e.ID, b, e.Expires.UnixMilli(), now.UnixMilli()).Err(); err != nil {
		return fmt.Errorf("put episode %s of %s: %w", e.ID, thread, err)
	}
	return nil
}

// Episodes implements Store.
func (r *Redis) Episodes(ctx context.Context, thread string) ([]Episode, error) {
	if thread == "" {
		return nil, ErrNoThread
	}
	h, x := r.episodeKeys(thread)
	ids, err := r.rdb.ZRangeByScore(ctx, x, &redis.ZRangeBy{Min: "(" + strconv.FormatInt(time.Now().UnixMilli(), 10), Max: "+inf"}).Result()
	if err != nil {
		return nil, fmt.Errorf("episodes of %s: %w", thread, err)
	}
	if len(ids) == 0 {
		return nil, nil
	}
	vals, err := r.rdb.HMGet(ctx, h, ids...).Result()
	if err != nil {
		return nil, fmt.Errorf("episodes of %s: %w", thread, err)
	}
	out := make([]Episode, 0, len(vals))
	for _, v := range vals {
		s, ok := v.(string)
		if !ok {
			continue
		}
		var e Episode
		if err := json.Unmarshal([]byte(s), &e); err != nil {
			return nil, fmt.Errorf("episodes of %s: %w", thread, err)
		}
		out = append(out, e)
	}
	sortEpisodes(out)
	return out, nil
}

// Forget implements Store.
func (r *Redis) Forget(ctx context.Context, thread string) error {
	if thread == "" {
		return ErrNoThread
	}
	list, ids, sum := r.keys(thread)
	h, x := r.episodeKeys(thread)
	if err := r.rdb.Del(ctx, list, ids, sum, h, x).Err(); err != nil {
		return fmt.Errorf("forget session %s: %w", thread, err)
	}
	return nil
}
