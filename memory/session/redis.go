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
//	{prefix}session:{thread}:size     integer, Session.Size (summary and turn text bytes)
//	{prefix}episodes:{thread}         hash id -> episode (JSON)
//	{prefix}episodes:{thread}:exp     sorted set id -> expiry (unix ms)
//
// Appends and folds are Lua scripts, so concurrent workers never lose a turn.
// An append costs in proportion to the turn: the script keeps the session's
// size beside it, so AppendFold reads the session only when it is to fold.
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

func (r *Redis) keys(thread string) (list, ids, summary, size string) {
	k := r.prefix + "session:" + thread
	return k, k + ":ids", k + ":summary", k + ":size"
}

// sizeLua defines size(list, summary, sizeKey): the session's size, from its
// key, or counted once for a session written before the key existed.
const sizeLua = `
local function textsize(raws)
  local n = 0
  for _, raw in ipairs(raws) do
    local c = cjson.decode(raw).content
    if type(c) == 'string' then n = n + string.len(c) end
  end
  return n
end
local function size(list, summary, sizekey)
  local n = redis.call('GET', sizekey)
  if n then return tonumber(n) end
  return string.len(redis.call('GET', summary) or '') + textsize(redis.call('LRANGE', list, 0, -1))
end
`

var appendScript = redis.NewScript(sizeLua + `
if redis.call('ZSCORE', KEYS[2], ARGV[1]) then return {0, 0} end
local n = size(KEYS[1], KEYS[3], KEYS[4]) + tonumber(ARGV[7])
redis.call('RPUSH', KEYS[1], ARGV[2])
local over = redis.call('LLEN', KEYS[1]) - tonumber(ARGV[3])
if over > 0 then
  n = n - textsize(redis.call('LRANGE', KEYS[1], 0, over - 1))
  redis.call('LTRIM', KEYS[1], over, -1)
end
redis.call('ZADD', KEYS[2], ARGV[5], ARGV[1])
redis.call('ZREMRANGEBYRANK', KEYS[2], 0, -tonumber(ARGV[6]) - 1)
redis.call('SET', KEYS[4], n, 'PX', ARGV[4])
redis.call('PEXPIRE', KEYS[1], ARGV[4])
redis.call('PEXPIRE', KEYS[2], ARGV[4])
redis.call('PEXPIRE', KEYS[3], ARGV[4])
return {1, n}
`)

// Append implements Store.
func (r *Redis) Append(ctx context.Context, thread string, t Turn) (bool, error) {
	return appendOne(ctx, r, thread, t)
}

// AppendFold implements Store. Each turn is appended by the append script
// (the turns of one call in one pipeline); the fold is a second script, with
// the summariser run in between, outside Redis. The fold applies only if the
// turns it summarised are still the oldest (another worker may have folded
// them first); the appends stand either way.
func (r *Redis) AppendFold(ctx context.Context, thread string, f Folder, ts ...Turn) ([]bool, error) {
	added, done, err := startAppend(thread, ts)
	if done {
		return added, err
	}
	list, ids, sum, size := r.keys(thread)
	cmds := make([]*redis.Cmd, len(ts))
	run := func(c redis.Scripter) error {
		for i, t := range ts {
			b, err := json.Marshal(t)
			if err != nil {
				return err
			}
			keys := []string{list, ids, sum, size}
			args := []any{t.ID, b, r.opt.MaxTurns, r.opt.TTL.Milliseconds(), time.Now().UnixMilli(), r.opt.MaxSeen, len(t.Content)}
			if len(ts) == 1 {
				cmds[i] = appendScript.Run(ctx, c, keys, args...)
			} else {
				// EVAL, not EVALSHA: a pipeline cannot load a missing script.
				cmds[i] = appendScript.Eval(ctx, c, keys, args...)
			}
		}
		return nil
	}
	if len(ts) == 1 {
		err = run(r.rdb)
	} else {
		_, err = r.rdb.Pipelined(ctx, func(p redis.Pipeliner) error { return run(p) })
	}
	if err != nil {
		return added, fmt.Errorf("append %d turns (first %s) to session %s: %w", len(ts), ts[0].ID, thread, err)
	}
	var last int64
	for i, c := range cmds {
		res, err := c.Int64Slice()
		if err != nil {
			return added, fmt.Errorf("append turn %s to session %s: %w", ts[i].ID, thread, err)
		}
		added[i] = res[0] == 1
		if added[i] {
			last = res[1]
		}
	}
	if f.Fold == nil || f.At <= 0 || last <= int64(f.At) {
		return added, nil
	}
	s, err := r.Load(ctx, thread)
	if err != nil {
		return added, err
	}
	n, summary, err := f.fold(ctx, &s)
	if err != nil || n == 0 {
		return added, err
	}
	if _, err := r.Fold(ctx, thread, n, s.Turns[n-1].ID, summary); err != nil {
		return added, err
	}
	return added, nil
}

// Load implements Store.
func (r *Redis) Load(ctx context.Context, thread string) (Session, error) {
	s := Session{Thread: thread}
	if thread == "" {
		return s, ErrNoThread
	}
	list, _, sum, _ := r.keys(thread)
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

var foldScript = redis.NewScript(sizeLua + `
local raw = redis.call('LINDEX', KEYS[1], tonumber(ARGV[1]) - 1)
if not raw then return 0 end
if cjson.decode(raw).id ~= ARGV[2] then return 0 end
local n = size(KEYS[1], KEYS[2], KEYS[3])
n = n - textsize(redis.call('LRANGE', KEYS[1], 0, tonumber(ARGV[1]) - 1))
n = n - string.len(redis.call('GET', KEYS[2]) or '') + string.len(ARGV[3])
redis.call('LTRIM', KEYS[1], tonumber(ARGV[1]), -1)
redis.call('SET', KEYS[2], ARGV[3], 'PX', ARGV[4])
redis.call('SET', KEYS[3], n, 'PX', ARGV[4])
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
	list, _, sum, size := r.keys(thread)
	ok, err := foldScript.Run(ctx, r.rdb, []string{list, sum, size}, n, lastID, summary, r.opt.TTL.Milliseconds()).Int()
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
	list, ids, sum, size := r.keys(thread)
	h, x := r.episodeKeys(thread)
	if err := r.rdb.Del(ctx, list, ids, sum, size, h, x).Err(); err != nil {
		return fmt.Errorf("forget session %s: %w", thread, err)
	}
	return nil
}
