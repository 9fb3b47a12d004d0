package cli

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"html"
	"io"
	"io/fs"
	"maps"
	"math/big"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"

	"github.com/relaystation/relay/bus"
	"github.com/relaystation/relay/bus/bustest"
	"github.com/relaystation/relay/config"
	"github.com/relaystation/relay/envelope"
	"github.com/relaystation/relay/internal/fakes"
	"github.com/relaystation/relay/internal/procs"
	"github.com/relaystation/relay/internal/testenv"
	"github.com/relaystation/relay/mappers/webhook"
	"github.com/relaystation/relay/tools"
)

// TestSecretCanariesEndToEnd is the end-to-end half of the secrets canary
// (TestEverySecretSettingIsRedacted is the unit half). It puts a distinct
// canary in every secret setting the binary knows (config.SecretSettings,
// plus one named by RELAY_REDACT_SECRETS) and passwords in NATS_URL,
// REDIS_URL and DATABASE_URL, and runs the relay binary (`relay serve`) on
// a NATS server that wants the canary password and on the machine's Redis
// and Postgres. It drives a GitHub issues.opened webhook signed with the
// canary secret, a signed Slack mention and one over Socket Mode, the model calling get-env on two
// real everything servers (one given every canary through ${env:…}, one
// given them written out, as a server that learned them elsewhere), the
// approval in Slack and the GitHub comment. Then it reads back everything
// the relay wrote or showed: every message of every stream, key-value
// bucket and object store, the Redis keys and Postgres rows of the run, the
// data directory (the audit log), the console's pages and envelope JSON
// (signed in with the operator's canary token), the process's stdout and
// stderr, and what the fake Slack, GitHub and model received besides the
// credentials meant for them; it fails naming each place a canary was
// found.
//
// SLACK_APP_TOKEN runs Socket Mode: a third mention arrives over a fake
// Socket Mode WebSocket. RELAY_NATS_TOKEN is read but not sent (NATS_URL has credentials of its
// own). The machine's Redis and Postgres have no authentication: the
// canary passwords in REDIS_URL and DATABASE_URL are sent and ignored
// (Redis accepts any password for its nopass default user; Postgres
// trusts).
func TestSecretCanariesEndToEnd(t *testing.T) {
	t.Parallel()
	testenv.SkipShort(t, "end-to-end with the binary")
	w := newCanaryWorld(t)
	w.start(t)
	w.drive(t)
	w.stopRelay(t)
	w.scanAll(t)
}

// canary is one planted secret: the setting it was put in and its value.
type canary struct{ setting, value string }

// canaryWorld is the relay under test with its canaries and the servers it
// talks to.
type canaryWorld struct {
	rid      string // digits unique to the run, in the repository, channel and Redis keys
	canaries []canary
	env      map[string]string
	bus      *bus.Bus // the test's client on the relay's prefix
	s        *stack
	dataDir  string
	schema   string
	redis    *redis.Client
	pg       *pgx.Conn
	proc     *procs.Process
	stdout   syncBuffer
	stderr   syncBuffer
	console  map[string]string // path -> body fetched from the console
	consoleA string
	issue    int
	target   string
	slackTS  string
	socket   *fakes.SlackSocket
	socketTS string // the ts of the mention sent over Socket Mode
	opName   string
}

// secretValue is the canary of a setting: distinct, none a part of another,
// of characters no HTML, JSON or URL encoding changes, long enough for every
// setting's minimum (RELAY_SECRET_KEY's 32).
func secretValue(setting, rid string) string {
	return "canary-" + strings.ToLower(setting) + "-" + rid + "-end"
}

// whsecCanary is a valid RELAY_WEBHOOK_SECRET ("whsec_" and base64 of 24
// random bytes) whose encoding holds no + or / (which HTML escapes).
func whsecCanary() string {
	for {
		k := make([]byte, 24)
		_, _ = rand.Read(k)
		if s := base64.StdEncoding.EncodeToString(k); !strings.ContainsAny(s, "+/") {
			return webhook.SecretPrefix + s
		}
	}
}

func newCanaryWorld(t *testing.T) *canaryWorld {
	t.Helper()
	n, _ := rand.Int(rand.Reader, big.NewInt(9e9))
	w := &canaryWorld{rid: fmt.Sprintf("%010d", n.Int64()+1e9), dataDir: t.TempDir(), console: map[string]string{}}
	w.schema = "canary_" + w.rid
	w.issue = 4242
	w.opName = "canary-op"

	// The registry: every secret setting the binary's services read.
	Run(t.Context(), []string{"dlq", "list"}, config.FromMap(map[string]string{"NATS_URL": "nats://127.0.0.1:1"}), &syncBuffer{}, &syncBuffer{})
	names := config.SecretSettings()
	if len(names) < 10 || !slices.Contains(names, "GITHUB_WEBHOOK_SECRET") {
		t.Fatalf("the secret registry has %v, want every secret setting", names)
	}
	// RELAY_REDACT_SECRETS names more secrets; one of them takes part too.
	names = append(names, "CANARY_VENDOR_KEY")
	w.env = map[string]string{"RELAY_REDACT_SECRETS": "CANARY_VENDOR_KEY"}
	for _, name := range names {
		v := secretValue(name, w.rid)
		switch name {
		case "SLACK_APP_TOKEN":
			v = "xapp-" + v // Socket Mode wants the app-level token's shape
		case "RELAY_WEBHOOK_SECRET":
			v = whsecCanary()
			w.canaries = append(w.canaries, canary{"RELAY_WEBHOOK_SECRET (the key without whsec_)", strings.TrimPrefix(v, webhook.SecretPrefix)})
		case "RELAY_CONSOLE_OPERATORS":
			tok := secretValue("console_operator_token", w.rid)
			w.canaries = append(w.canaries, canary{"RELAY_CONSOLE_OPERATORS (the operator's token)", tok})
			v = w.opName + "=" + tok
		}
		w.env[name] = v
		w.canaries = append(w.canaries, canary{name, v})
	}

	// A NATS server of the test's own that wants the canary password (the
	// machine's nats-server 2.9 lacks the multi-filter consumers the relay
	// needs), and the machine's Redis and Postgres, whose canary passwords
	// are sent and ignored (no authentication there).
	natsPW := secretValue("NATS_URL_password", w.rid)
	ns := bustest.NewRestartable(t, server.Options{Username: "relay", Password: natsPW})
	ns.Start()
	natsURL, pw := withPassword(t, ns.URL(), "relay", "NATS_URL", w.rid)
	w.canaries = append(w.canaries, pw)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	var err error
	w.bus, err = bus.Connect(ctx, bus.Config{URL: natsURL, Name: t.Name()})
	must(t, err)
	t.Cleanup(w.bus.Close)
	var redisURL string
	redisURL, pw = withPassword(t, testenv.Getenv("REDIS_URL", "redis://127.0.0.1:6379"), "default", "REDIS_URL", w.rid)
	w.canaries = append(w.canaries, pw)
	dbURL, pw := withPassword(t, testenv.Getenv("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"), "postgres", "DATABASE_URL", w.rid)
	w.canaries = append(w.canaries, pw)
	w.openStores(t, redisURL, dbURL)
	q := url.Values{"search_path": {w.schema + ",public"}}
	if strings.Contains(dbURL, "?") {
		dbURL += "&" + q.Encode()
	} else {
		dbURL += "?" + q.Encode()
	}

	sl, gh := fakes.NewSlack(t), fakes.NewGitHub(t)
	llm := fakes.NewLLM(t, canaryScript)
	w.s = &stack{t: t, slack: sl, gh: gh, llm: llm, slackSecret: w.env["SLACK_SIGNING_SECRET"]}
	// SLACK_APP_TOKEN runs Socket Mode besides the webhooks: a mention
	// arrives over the socket too.
	w.socketTS = fmt.Sprintf("%d.000200", time.Now().Unix())
	w.socket = fakes.NewSlackSocket(t, map[string]any{"envelope_id": "env-" + w.rid, "type": "events_api", "retry_attempt": 0,
		"payload": map[string]any{"token": "x", "team_id": e2eTeam, "api_app_id": "A0APP01", "type": "event_callback",
			"event_id": "Ev" + w.rid, "event_time": time.Now().Unix(),
			"event": map[string]any{"type": "app_mention", "user": e2eApprover, "text": "@relay-bot anything new on the socket?",
				"ts": w.socketTS, "channel": "C" + w.rid, "event_ts": w.socketTS}}})
	sl.SetSocketURL(w.socket.URL())

	// Two everything servers get every canary in their environment: one
	// through ${env:…} (the tool runner redacts a server's own secrets),
	// the other written out (a server that learned the relay's secrets some
	// other way: only the relay's redaction of every secret it read stops
	// them).
	planted, literal := map[string]string{}, map[string]string{}
	for i, c := range w.canaries {
		if _, ok := w.env[c.setting]; ok {
			planted["PLANTED_"+c.setting] = "${env:" + c.setting + "}"
		}
		literal[fmt.Sprintf("LITERAL_%d", i)] = c.value
	}
	bin := testenv.NPMBin(t, "mcp-server-everything")
	leaky := filepath.Join(t.TempDir(), "leaky-everything") // another command: not a duplicate entry
	must(t, os.Symlink(bin, leaky))
	mcp, _ := json.Marshal(map[string]any{"servers": map[string]any{
		"everything": map[string]any{"command": bin, "args": []string{"stdio"}, "env": planted},
		"leaky":      map[string]any{"command": leaky, "args": []string{"stdio"}, "env": literal},
	}})
	canaries := maps.Clone(w.env) // over loopEnv's test secrets
	maps.Copy(w.env, loopEnv(t, string(mcp), sl, gh, llm))
	maps.Copy(w.env, canaries)
	w.env["RELAY_POLICY"] = writeTemp(t, "policy.yaml", "roles:\n  - role: agent\n    capabilities: [\"everything.*\", \"leaky.*\"]\n")
	w.consoleA = freeAddr(t)
	maps.Copy(w.env, map[string]string{
		"NATS_URL": natsURL, "REDIS_URL": redisURL, "DATABASE_URL": dbURL,
		"RELAY_HTTP_ADDR": freeAddr(t), "RELAY_CONSOLE_ADDR": w.consoleA, "RELAY_DATA_DIR": w.dataDir,
		"RELAY_LOG_FORMAT": "json", "RELAY_LOG_LEVEL": "debug",
		"EMBEDDINGS_BASE_URL": llm.URL(), "EMBEDDINGS_MODEL": "fake-embed", "RELAY_MEMORY_DIMENSIONS": "3",
	})
	return w
}

// withPassword returns raw with user and a canary password of setting in
// it, and the canary.
func withPassword(t *testing.T, raw, user, setting, rid string) (string, canary) {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatalf("%s %q: %v", setting, raw, err)
	}
	if u.User != nil {
		user = u.User.Username()
	}
	pw := secretValue(setting+"_password", rid)
	u.User = url.UserPassword(user, pw)
	return u.String(), canary{setting + " (password)", pw}
}

// openStores opens the test's own clients of Redis and Postgres (without
// the canary passwords) and creates the Postgres schema the relay writes
// in; both are cleaned when the test ends.
func (w *canaryWorld) openStores(t *testing.T, redisURL, dbURL string) {
	t.Helper()
	opt, err := redis.ParseURL(redisURL)
	must(t, err)
	opt.Password = ""
	w.redis = redis.NewClient(opt)
	if err := w.redis.Ping(t.Context()).Err(); err != nil {
		testenv.Missing(t, "redis at %s: %v", opt.Addr, err)
	}
	t.Cleanup(func() {
		ctx := context.Background()
		keys, _ := w.redisKeys(ctx)
		if len(keys) > 0 {
			w.redis.Del(ctx, keys...)
		}
		w.redis.Close()
	})
	u, _ := url.Parse(dbURL)
	u.User = url.User(u.User.Username())
	w.pg, err = pgx.Connect(t.Context(), u.String())
	if err != nil {
		testenv.Missing(t, "postgres at %s: %v", u.Host, err)
	}
	if _, err := w.pg.Exec(t.Context(), "CREATE SCHEMA "+w.schema); err != nil {
		t.Fatalf("create schema %s: %v", w.schema, err)
	}
	t.Cleanup(func() {
		_, _ = w.pg.Exec(context.Background(), "DROP SCHEMA "+w.schema+" CASCADE")
		w.pg.Close(context.Background())
	})
}

// canaryScript is the model: every task first calls both servers'
// get-env (which prints the server's environment, the canaries included),
// then answers.
func canaryScript(req *fakes.ChatRequest) fakes.Reply {
	if !req.HasToolResult() {
		var calls []fakes.ToolCall
		for _, n := range req.ToolNames() {
			if strings.HasSuffix(n, "get-env") {
				calls = append(calls, fakes.ToolCall{Name: n, Args: map[string]any{}})
			}
		}
		if len(calls) > 0 {
			return fakes.Reply{ToolCalls: calls}
		}
	}
	return fakes.Reply{Text: "Thanks for the report. The environment looks fine; we will look at the login crash."}
}

// start runs the relay binary's `relay serve` (every service in one
// process) and waits until it is ready and its tool runner lists both
// servers' tools.
func (w *canaryWorld) start(t *testing.T) {
	t.Helper()
	cmd := exec.Command(relayBinary(t), "serve")
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + w.dataDir}
	for k, v := range w.env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	cmd.Stdout, cmd.Stderr = &w.stdout, &w.stderr
	var err error
	w.proc, err = procs.Start(cmd)
	must(t, err)
	t.Cleanup(func() {
		w.proc.Stop(20 * time.Second)
		if t.Failed() {
			t.Logf("relay log:\n%s", w.stderr.String())
		}
	})
	w.s.base = "http://" + w.env["RELAY_HTTP_ADDR"]
	if err := w.proc.WaitReady(t.Context(), w.s.base+"/readyz", 30*time.Second); err != nil {
		t.Fatalf("relay: %v", err)
	}
	w.s.nc = w.bus.Conn()
	testenv.WaitFor(t, 30*time.Second, "the tool runner to list both servers' get-env", func() bool {
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
		defer cancel()
		list, err := tools.ListRemote(ctx, w.bus.Conn(), w.bus.Prefix(), "agent")
		n := 0
		for _, tl := range list {
			if tl.Tool == "get-env" {
				n++
			}
		}
		return err == nil && n == 2
	})
}

// drive sends the traffic: a signed issues.opened webhook whose answer is
// approved in Slack and posted as a comment, a Slack mention the agent
// answers, a long-term memory, and the console's pages.
func (w *canaryWorld) drive(t *testing.T) {
	t.Helper()
	s := w.s
	// The GitHub issue, in a repository of the run's own.
	body, target := openedIssue(issuesOpenedPayload(t), w.issue, "canary")
	var p map[string]any
	must(t, json.Unmarshal(body, &p))
	repo := p["repository"].(map[string]any)
	owner := "cnry" + w.rid
	repo["full_name"], repo["name"], repo["html_url"] = owner+"/app", "app", "https://github.com/"+owner+"/app"
	repo["owner"].(map[string]any)["login"] = owner
	p["issue"].(map[string]any)["html_url"] = fmt.Sprintf("https://github.com/%s/app/issues/%d", owner, w.issue)
	body, _ = json.Marshal(p)
	w.target = strings.Replace(target, target[:strings.Index(target, "#")], owner+"/app", 1)
	s.send(githubWebhook(t.Context(), s.base, w.env["GITHUB_WEBHOOK_SECRET"], "issues", "canary-"+w.rid, body))

	post := s.approvalPost(w.target)
	s.click(e2eApprover, post, "approve")
	testenv.WaitFor(t, 30*time.Second, "the approved comment", func() bool { return len(s.comments(w.issue)) > 0 })
	if c := s.comments(w.issue)[0]; c.Token != w.env["GITHUB_TOKEN"] {
		t.Errorf("comment posted with token %q, want the GITHUB_TOKEN canary", c.Token)
	}
	s.updatedTo(post, e2eApprover)

	// A Slack mention in a channel of the run's own.
	channel := "C" + w.rid
	w.slackTS = s.mention(e2eApprover, channel, "@relay-bot is the login service healthy?")
	thread := fmt.Sprintf("slack:%s/%s/%s", e2eTeam, channel, w.slackTS)
	testenv.WaitFor(t, 30*time.Second, "the agent's suggestion for the Slack thread", func() bool {
		return len(w.messages(t, "agent.suggestion", thread)) > 0
	})

	thread = fmt.Sprintf("slack:%s/C%s/%s", e2eTeam, w.rid, w.socketTS)
	testenv.WaitFor(t, 30*time.Second, "the agent's suggestion for the mention sent over Socket Mode", func() bool {
		return slices.Contains(w.socket.Acked(), "env-"+w.rid) && len(w.messages(t, "agent.suggestion", thread)) > 0
	})

	// A long-term memory, so the Postgres store holds a row to read back.
	e := envelope.New(envelope.ChannelInternal, envelope.RoleSystem, "remember")
	e.Meta.Thread = "github:" + w.target
	e.MemoryUpdate = &envelope.MemoryUpdate{Kind: envelope.MemoryLongTerm, Data: map[string]any{"text": "The login crash of " + w.target + " was looked at."}}
	if _, err := w.bus.Publish(t.Context(), "memory.update", e); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 20*time.Second, "the memory row in Postgres", func() bool {
		var n int
		return w.pg.QueryRow(t.Context(), "SELECT count(*) FROM "+w.schema+".memories").Scan(&n) == nil && n > 0
	})
	// Every get-env result was redacted on its way to the bus.
	results := w.messages(t, "tool.result", "")
	if len(results) < 4 {
		t.Fatalf("got %d tool results, want the get-env results of both servers in both tasks", len(results))
	}
	for _, m := range results {
		d := string(m.Data)
		if !strings.Contains(d, "PLANTED_GITHUB_TOKEN") && !strings.Contains(d, "LITERAL_0") || !strings.Contains(d, "REDACTED") {
			t.Errorf("the get-env result %s does not show the planted, redacted environment", clipped(d))
		}
	}
	w.readConsole(t)
}

// messages are the stored messages of the relative subject (of thread,
// when not "") in the relay's work stream.
func (w *canaryWorld) messages(t *testing.T, subject, thread string) []*jetstream.RawStreamMsg {
	t.Helper()
	var out []*jetstream.RawStreamMsg
	for _, m := range w.streamMessages(t, strings.ToUpper(w.bus.Prefix())+"_WORK") {
		if m.Subject == w.bus.Prefix()+"."+subject && (thread == "" || m.Header.Get("Relay-Thread") == thread) {
			out = append(out, m)
		}
	}
	return out
}

// streamMessages reads every message stored in stream.
func (w *canaryWorld) streamMessages(t *testing.T, stream string) []*jetstream.RawStreamMsg {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	st, err := w.bus.JetStream().Stream(ctx, stream)
	if err != nil {
		t.Fatalf("stream %s: %v", stream, err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatalf("stream %s: %v", stream, err)
	}
	var out []*jetstream.RawStreamMsg
	for seq := info.State.FirstSeq; seq > 0 && seq <= info.State.LastSeq; seq++ {
		m, err := st.GetMsg(ctx, seq)
		if err != nil {
			continue // deleted or purged (a key-value history, an acked work item)
		}
		out = append(out, m)
	}
	return out
}

// readConsole signs in to the console with the operator's token and reads
// its pages and the JSON of every envelope of the prefix's streams.
func (w *canaryWorld) readConsole(t *testing.T) {
	t.Helper()
	base := "http://" + w.consoleA
	jar, _ := cookiejar.New(nil)
	c := &http.Client{Jar: jar, Timeout: 10 * time.Second}
	form := url.Values{"token": {secretValue("console_operator_token", w.rid)}, "next": {"/"}}
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, base+"/login", strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", base)
	resp, err := c.Do(req)
	must(t, err)
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Request.URL.Path == "/login" {
		t.Fatalf("console sign-in: got %d at %s, want the overview", resp.StatusCode, resp.Request.URL)
	}
	paths := []string{"/", "/events", "/approvals", "/dlq", "/tools", "/tools?audit=get-env", "/story?id=" + url.QueryEscape("github:"+w.target)}
	var ids []string
	prefix := strings.ToUpper(w.bus.Prefix())
	for _, stream := range []string{prefix + "_IN", prefix + "_WORK", prefix + "_DLQ"} {
		for _, m := range w.streamMessages(t, stream) {
			if id := m.Header.Get("Relay-Envelope-Id"); id != "" && !slices.Contains(ids, id) {
				ids = append(ids, id)
				paths = append(paths, "/events/"+id)
			}
			if stream == prefix+"_DLQ" {
				paths = append(paths, fmt.Sprintf("/dlq/%d", m.Sequence))
			}
		}
	}
	for _, p := range paths {
		resp, err := c.Get(base + p)
		must(t, err)
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK && !strings.HasPrefix(p, "/events/") {
			t.Errorf("console %s: got %d, want 200: %s", p, resp.StatusCode, clipped(string(b)))
		}
		w.console[p] = string(b)
	}
	if !strings.Contains(w.console["/events/"+ids[0]], ids[0]) {
		t.Errorf("the console's envelope page lacks envelope %s", ids[0])
	}
}

// stopRelay stops the relay as an orchestrator does (SIGTERM), so its logs
// and audit are complete.
func (w *canaryWorld) stopRelay(t *testing.T) {
	t.Helper()
	if !w.proc.Stop(20 * time.Second) {
		t.Error("the relay did not stop within 20s of SIGTERM")
	}
}

// redisKeys are the keys of the run's threads.
func (w *canaryWorld) redisKeys(ctx context.Context) ([]string, error) {
	var keys []string
	iter := w.redis.Scan(ctx, 0, "*"+w.rid+"*", 1000).Iterator()
	for iter.Next(ctx) {
		keys = append(keys, iter.Val())
	}
	return keys, iter.Err()
}

// redisText is everything stored under key.
func (w *canaryWorld) redisText(ctx context.Context, key string) (string, error) {
	typ, err := w.redis.Type(ctx, key).Result()
	if err != nil {
		return "", err
	}
	var v any
	switch typ {
	case "string":
		v, err = w.redis.Get(ctx, key).Result()
	case "list":
		v, err = w.redis.LRange(ctx, key, 0, -1).Result()
	case "hash":
		v, err = w.redis.HGetAll(ctx, key).Result()
	case "set":
		v, err = w.redis.SMembers(ctx, key).Result()
	case "zset":
		v, err = w.redis.ZRangeWithScores(ctx, key, 0, -1).Result()
	case "none":
		return "", nil // expired meanwhile
	default:
		return "", fmt.Errorf("key %s: type %s not read", key, typ)
	}
	return fmt.Sprint(v), err
}

// leakFinder collects where canaries were found.
type leakFinder struct {
	t        *testing.T
	canaries []canary
	places   map[string]int // what was read, per kind
}

// check reports every canary in text, read at where (its kind before the
// first ":").
func (f *leakFinder) check(where, text string) {
	f.t.Helper()
	kind, _, _ := strings.Cut(where, ":")
	f.places[kind]++
	for _, c := range f.canaries {
		for _, variant := range []string{text, html.UnescapeString(text)} {
			if i := strings.Index(variant, c.value); i >= 0 {
				f.t.Errorf("LEAK of %s in %s: …%s…", c.setting, where, variant[max(0, i-120):min(len(variant), i+len(c.value)+40)])
				break
			}
		}
	}
}

// scanAll reads back everything the relay wrote or showed and fails naming
// each place a canary was found.
func (w *canaryWorld) scanAll(t *testing.T) {
	t.Helper()
	f := &leakFinder{t: t, canaries: w.canaries, places: map[string]int{}}
	ctx := t.Context()

	// The bus: every stream, key-value bucket and object store of the prefix.
	streams, err := bustest.Streams(ctx, w.bus.JetStream(), w.bus.Prefix())
	must(t, err)
	for _, name := range streams {
		for _, m := range w.streamMessages(t, name) {
			f.check(fmt.Sprintf("stream:%s seq %d (%s)", name, m.Sequence, m.Subject), fmt.Sprint(m.Header)+m.Subject+string(m.Data))
		}
	}
	for _, want := range []string{"_IN", "_WORK", "_tasks", "_approvals", "_outbound", "_TOOLCALLS"} {
		if !slices.ContainsFunc(streams, func(s string) bool { return strings.HasSuffix(strings.ToLower(s), strings.ToLower(want)) }) {
			t.Errorf("no stream or bucket *%s among %v: the relay did not run on the test's prefix", want, streams)
		}
	}

	// Redis: the sessions and episodes of the run's threads.
	keys, err := w.redisKeys(ctx)
	must(t, err)
	if len(keys) == 0 {
		t.Error("no Redis keys of the run's threads: the sessions went elsewhere")
	}
	for _, k := range keys {
		v, err := w.redisText(ctx, k)
		if err != nil {
			t.Error(err)
		}
		f.check("redis:"+k, k+" "+v)
	}

	// Postgres: every row of every table of the test's schema.
	rows, err := w.pg.Query(ctx, "SELECT table_name FROM information_schema.tables WHERE table_schema = $1", w.schema)
	must(t, err)
	tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
	must(t, err)
	if !slices.Contains(tables, "memories") {
		t.Errorf("tables of schema %s: %v, want memories", w.schema, tables)
	}
	for _, tbl := range tables {
		rows, err := w.pg.Query(ctx, fmt.Sprintf("SELECT t::text FROM %s.%s t", pgx.Identifier{w.schema}.Sanitize(), pgx.Identifier{tbl}.Sanitize()))
		must(t, err)
		texts, err := pgx.CollectRows(rows, pgx.RowTo[string])
		must(t, err)
		for i, row := range texts {
			f.check(fmt.Sprintf("postgres:%s.%s row %d", w.schema, tbl, i), row)
		}
	}

	// The data directory: the audit log and every other file the relay wrote.
	audit := false
	must(t, filepath.WalkDir(w.dataDir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		audit = audit || strings.HasSuffix(path, "tools.jsonl") && strings.Contains(string(b), "get-env")
		f.check("file:"+path, string(b))
		return nil
	}))
	if !audit {
		t.Error("the audit log has no get-env call")
	}

	// The console, the process's output, and what the fakes received
	// besides the credentials meant for them.
	for p, body := range w.console {
		f.check("console:"+p, body)
	}
	f.check("log:stderr", w.stderr.String())
	f.check("log:stdout", w.stdout.String())
	for i, c := range w.s.slack.Calls("") {
		f.check(fmt.Sprintf("slack:%s call %d", c.Method, i), fmt.Sprint(c.Params))
	}
	for _, c := range w.s.gh.Comments() {
		f.check(fmt.Sprintf("github:comment %d", c.ID), c.Body)
	}
	for i, r := range w.s.llm.Requests() {
		b, _ := json.Marshal(r)
		f.check(fmt.Sprintf("model:request %d", i), string(b))
	}
	t.Logf("read %v; canaries %d", f.places, len(w.canaries))
}

// clipped is s cut for a failure message.
func clipped(s string) string {
	if len(s) > 600 {
		return s[:600] + "…"
	}
	return s
}
