package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"

	"github.com/relaystation/relay/bus"
	"github.com/relaystation/relay/internal/slackscopes"
	"github.com/relaystation/relay/secret"
	"github.com/relaystation/relay/services/ingest"
	"github.com/relaystation/relay/tools"
)

func init() {
	registerCommand(&command{
		name:    "doctor",
		usage:   "[-json] [--deep] [--repo OWNER/NAME] [--public-url URL]",
		summary: "check every configured part against the real thing: one line each, with what to do when it fails; exit 1 on any failure",
		run:     runDoctor,
	})
}

// check is one line of `relay doctor`.
type check struct {
	Name   string `json:"name"`
	OK     bool   `json:"ok"`
	Detail string `json:"detail"`
	// Fix says what to do, on a failure.
	Fix string `json:"fix,omitempty"`
}

// doctor holds what the checks share.
type doctor struct {
	a         *app
	deep      bool
	repo      string
	publicURL string
	client    *http.Client
	out       []check
}

func (d *doctor) ok(name, format string, args ...any) {
	d.out = append(d.out, check{Name: name, OK: true, Detail: fmt.Sprintf(format, args...)})
}

func (d *doctor) fail(name, fix, format string, args ...any) {
	d.out = append(d.out, check{Name: name, Detail: fmt.Sprintf(format, args...), Fix: fix})
}

// minSecretLen is the shortest webhook secret doctor accepts.
const minSecretLen = 16

// maxSkew is the clock difference doctor accepts against Slack's and
// GitHub's Date headers: Slack refuses signatures older than 5 minutes.
const maxSkew = time.Minute

func runDoctor(ctx context.Context, a *app, args []string) error {
	ts := readToolSettings(a.env)
	ing := ingest.ReadSettings(a.env)
	slackToken := a.env.Secret("SLACK_BOT_TOKEN")
	slackAPI := a.env.URL("SLACK_API_URL", "http", "https")
	channel := a.env.String("SLACK_APPROVAL_CHANNEL", "")
	ghToken := a.env.Secret("GITHUB_TOKEN")
	ghAPI := a.env.URL("GITHUB_API_URL", "http", "https")
	llmURL, llmKey, llmModel := a.env.URL("LLM_BASE_URL", "http", "https"), a.env.Secret("LLM_API_KEY"), a.env.String("LLM_MODEL", "")
	embURL, embKey, embModel := a.env.URL("EMBEDDINGS_BASE_URL", "http", "https"), a.env.Secret("EMBEDDINGS_API_KEY"), a.env.String("EMBEDDINGS_MODEL", "")
	redisURL, dbURL := a.env.URL("REDIS_URL", "redis", "rediss"), a.env.URL("DATABASE_URL", "postgres", "postgresql")
	if err := a.checkEnv(); err != nil {
		return err
	}
	flags := a.flags("doctor")
	asJSON := flags.Bool("json", false, "print the checks as a JSON array")
	deep := flags.Bool("deep", false, "also make one tiny call to the LLM and embeddings endpoints")
	repo := flags.String("repo", "", "check GitHub access to OWNER/NAME and its webhook")
	publicURL := flags.String("public-url", "", "the relay's public URL (webhooks arrive at URL/webhooks/...): check it answers and GitHub's webhook points at it")
	if err := flags.Parse(args); err != nil {
		return err
	}
	d := &doctor{a: a, deep: *deep, repo: *repo, publicURL: strings.TrimRight(*publicURL, "/"), client: &http.Client{Timeout: 10 * time.Second}}
	d.secrets(ing)
	d.nats(ctx)
	if redisURL != "" {
		d.redis(ctx, redisURL)
	}
	if dbURL != "" {
		d.postgres(ctx, dbURL)
	}
	// Slack, GitHub and the model are what a suggestion approved in Slack
	// needs: missing, each is a failing line; Redis, Postgres and
	// embeddings are optional.
	if slackToken.IsSet() {
		d.slack(ctx, cmpOrURL(slackAPI, "https://slack.com/api/"), slackToken, channel)
	} else {
		d.fail("slack", "create the app from `relay setup slack`'s manifest, install it and set SLACK_BOT_TOKEN and SLACK_SIGNING_SECRET", "SLACK_BOT_TOKEN is not set")
	}
	if ghToken.IsSet() {
		d.github(ctx, cmpOrURL(ghAPI, "https://api.github.com/"), ghToken)
	} else {
		d.fail("github", "set GITHUB_TOKEN (a token with issues and pull requests: read and write), then `relay setup github`", "GITHUB_TOKEN is not set")
	}
	if llmURL != "" {
		d.models(ctx, "llm", llmURL, llmKey, llmModel, "LLM_BASE_URL", "LLM_MODEL")
	} else {
		d.fail("llm", "set LLM_BASE_URL (an OpenAI-compatible base URL ending in /v1), LLM_API_KEY and LLM_MODEL", "LLM_BASE_URL is not set")
	}
	if embURL != "" {
		d.models(ctx, "embeddings", embURL, embKey, embModel, "EMBEDDINGS_BASE_URL", "EMBEDDINGS_MODEL")
	}
	for _, s := range ts.Servers {
		p := tools.ProbeServer(ctx, ts.Runner, s)
		if p.Status == tools.ProbeUnhealthy || p.Status == tools.ProbeNeedsLogin {
			d.fail("mcp "+s.Name, fmt.Sprintf("run `relay mcp test %s` and fix the server's entry in %s", s.Name, ts.ConfigPath), "%s: %s", p.Status, p.Error)
		} else {
			d.ok("mcp "+s.Name, "%s, %d tools", p.Status, len(p.Tools))
		}
	}
	if d.publicURL != "" {
		d.public(ctx)
	}
	failed := 0
	for _, c := range d.out {
		if !c.OK {
			failed++
		}
	}
	if *asJSON {
		if err := json.NewEncoder(a.stdout).Encode(d.out); err != nil {
			return err
		}
	} else {
		for _, c := range d.out {
			if c.OK {
				fmt.Fprintf(a.stdout, "ok    %-16s %s\n", c.Name, c.Detail)
			} else {
				fmt.Fprintf(a.stdout, "FAIL  %-16s %s -> %s\n", c.Name, c.Detail, c.Fix)
			}
		}
		fmt.Fprintf(a.stdout, "%d check(s), %d failed\n", len(d.out), failed)
	}
	if failed > 0 {
		return &exitError{code: 1}
	}
	return nil
}

func cmpOrURL(u, def string) string {
	if u == "" {
		return def
	}
	return u
}

// secrets: every provider's webhook secret set and long enough.
func (d *doctor) secrets(ing ingest.Settings) {
	var set []string
	for _, p := range ing.Providers {
		if !p.Secret.IsSet() {
			continue
		}
		if n := len(p.Secret.Reveal()); n < minSecretLen {
			d.fail("secret "+p.Name, fmt.Sprintf("generate a longer one (openssl rand -hex 32) and enter it in %s's webhook settings too", p.Name),
				"%s is %d characters, under %d", p.SecretVar, n, minSecretLen)
			continue
		}
		set = append(set, p.SecretVar)
	}
	if len(set) == 0 && !slices.ContainsFunc(d.out, func(c check) bool { return strings.HasPrefix(c.Name, "secret ") }) {
		d.fail("secrets", "set GITHUB_WEBHOOK_SECRET (openssl rand -hex 32; `relay init` writes one) and enter it in the webhook's settings",
			"no webhook secret is set: every webhook is refused with 401")
		return
	}
	if len(set) > 0 {
		d.ok("secrets", "%s set, %d+ characters", strings.Join(set, ", "), minSecretLen)
	}
}

// nats: the bus the operator commands use answers, with JetStream, its
// streams, their replicas and the space left.
func (d *doctor) nats(ctx context.Context) {
	url, why := d.a.busURL()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	b, err := bus.Connect(ctx, bus.Config{URL: url, Token: d.a.base.NATSToken, Replicas: d.a.base.Replicas, FailFast: true, Name: "relay-doctor"})
	if err != nil {
		d.fail("nats", "start the relay (`relay serve`) in this folder, or set NATS_URL to a NATS server with JetStream (nats-server -js)",
			"%s (%s): %v", secret.RedactURLs(url), why, err)
		return
	}
	defer b.Close()
	info, err := b.JetStream().AccountInfo(ctx)
	if err != nil {
		d.fail("nats", "enable JetStream on the server (nats-server -js)", "%s: JetStream: %v", secret.RedactURLs(url), err)
		return
	}
	var streams []string
	var low []string
	for _, name := range []string{b.StreamName("in.x"), b.StreamName("agent.x"), b.StreamName("dlq.x")} {
		s, err := b.JetStream().Stream(ctx, name)
		if err != nil {
			d.fail("nats", "start `relay serve` once: it creates the streams", "stream %s: %v", name, err)
			return
		}
		si := s.CachedInfo()
		streams = append(streams, name)
		if si.Config.Replicas < d.a.base.Replicas {
			low = append(low, fmt.Sprintf("%s has %d replica(s)", name, si.Config.Replicas))
		}
	}
	if len(low) > 0 {
		d.fail("nats", fmt.Sprintf("restart `relay serve` with RELAY_STREAM_REPLICAS=%d on a cluster of as many servers", d.a.base.Replicas),
			"%s, want %d", strings.Join(low, ", "), d.a.base.Replicas)
		return
	}
	free := "no limit"
	if max := info.Limits.MaxStore; max > 0 {
		left := max - int64(info.Store)
		free = fmt.Sprintf("%d MiB of %d MiB left", left>>20, max>>20)
		if left < max/10 {
			d.fail("nats", "raise the account's JetStream max_file_store, or shorten RELAY_STREAM_* retention", "JetStream storage almost full: %s", free)
			return
		}
	}
	d.ok("nats", "%s (%s): JetStream, streams %s, storage %s", secret.RedactURLs(url), why, strings.Join(streams, ", "), free)
}

func (d *doctor) redis(ctx context.Context, u string) {
	opt, err := redis.ParseURL(u)
	if err != nil {
		d.fail("redis", "fix REDIS_URL (redis://host:6379/0)", "REDIS_URL: %v", err)
		return
	}
	opt.MaxRetries = -1 // one answer is enough
	c := redis.NewClient(opt)
	defer c.Close()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := c.Ping(ctx).Err(); err != nil {
		d.fail("redis", "start Redis or fix REDIS_URL", "%s: %v", secret.RedactURLs(u), err)
		return
	}
	d.ok("redis", "%s answers PING", secret.RedactURLs(u))
}

func (d *doctor) postgres(ctx context.Context, u string) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, u)
	if err != nil {
		d.fail("postgres", "start Postgres or fix DATABASE_URL", "%s: %v", secret.RedactURLs(u), err)
		return
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var v string
	err = conn.QueryRow(ctx, "SELECT extversion FROM pg_extension WHERE extname = 'vector'").Scan(&v)
	if errors.Is(err, pgx.ErrNoRows) {
		d.fail("postgres", "run CREATE EXTENSION vector; in the database (install pgvector first)", "%s: the vector extension is not installed", secret.RedactURLs(u))
		return
	}
	if err != nil {
		d.fail("postgres", "check the database user's rights", "%s: %v", secret.RedactURLs(u), err)
		return
	}
	d.ok("postgres", "%s with vector %s", secret.RedactURLs(u), v)
}

// get calls an API and decodes its JSON answer into out.
func (d *doctor) call(ctx context.Context, method, u, auth string, body io.Reader, out any) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, method, u, body)
	if err != nil {
		return nil, err
	}
	if auth != "" {
		req.Header.Set("Authorization", "Bearer "+auth)
	}
	req.Header.Set("Accept", "application/json")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := d.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if resp.StatusCode >= 300 {
		return resp, fmt.Errorf("%s %s: %s", method, secret.RedactURLs(u), resp.Status)
	}
	if out != nil {
		if err := json.Unmarshal(raw, out); err != nil {
			return resp, fmt.Errorf("%s %s: not JSON: %w", method, secret.RedactURLs(u), err)
		}
	}
	return resp, nil
}

// clock compares the local clock with a server's Date header.
func (d *doctor) clock(name string, resp *http.Response) {
	t, err := http.ParseTime(resp.Header.Get("Date"))
	if err != nil {
		return
	}
	skew := time.Since(t)
	if skew < 0 {
		skew = -skew
	}
	if skew > maxSkew+time.Second { // Date has whole seconds
		d.fail("clock", "synchronise the clock (NTP: timedatectl set-ntp true); Slack refuses signatures more than 5 minutes old",
			"%s off by %s against %s's Date header", time.Since(t).Round(time.Second), skew.Round(time.Second), name)
		return
	}
	d.ok("clock", "within %s of %s's Date header", maxSkew, name)
}

func (d *doctor) slack(ctx context.Context, api string, token secret.Value, channel string) {
	api = strings.TrimRight(api, "/") + "/"
	var auth struct {
		OK                bool
		Error, User, Team string
		UserID            string `json:"user_id"`
	}
	resp, err := d.call(ctx, http.MethodPost, api+"auth.test", token.Reveal(), nil, &auth)
	switch {
	case err != nil:
		d.fail("slack", "check SLACK_API_URL and the network", "auth.test: %v", err)
		return
	case !auth.OK:
		d.fail("slack", "copy the Bot User OAuth Token (xoxb-...) of the app's OAuth & Permissions page into SLACK_BOT_TOKEN", "auth.test: %s", auth.Error)
		return
	}
	d.clock("Slack", resp)
	if missing := slackscopes.Missing(resp.Header.Get("X-OAuth-Scopes")); len(missing) > 0 {
		d.fail("slack scopes", "add the scopes (or create the app from `relay setup slack`'s manifest), reinstall the app and copy the new token",
			"the bot token lacks %s", strings.Join(missing, ", "))
	} else {
		d.ok("slack scopes", "the bot token has the %d scopes the relay needs", len(slackscopes.Bot))
	}
	d.ok("slack", "bot %s (%s) in team %s", auth.User, auth.UserID, auth.Team)
	if channel == "" {
		return
	}
	var info struct {
		OK      bool
		Error   string
		Channel struct {
			Name     string
			IsMember bool `json:"is_member"`
		}
	}
	if _, err := d.call(ctx, http.MethodPost, api+"conversations.info?channel="+url.QueryEscape(channel), token.Reveal(), nil, &info); err != nil || !info.OK {
		d.fail("slack channel", "check SLACK_APPROVAL_CHANNEL (a channel id, C...) and invite the bot: /invite @relay",
			"conversations.info %s: %v%s", channel, err, info.Error)
		return
	}
	if !info.Channel.IsMember {
		d.fail("slack channel", fmt.Sprintf("invite the bot into #%s: /invite @%s", info.Channel.Name, auth.User),
			"the bot is not a member of the approvals channel %s (#%s)", channel, info.Channel.Name)
		return
	}
	d.ok("slack channel", "the bot is in the approvals channel #%s", info.Channel.Name)
}

func (d *doctor) github(ctx context.Context, api string, token secret.Value) {
	api = strings.TrimRight(api, "/") + "/"
	var user struct{ Login string }
	resp, err := d.call(ctx, http.MethodGet, api+"user", token.Reveal(), nil, &user)
	if err != nil {
		d.fail("github", "create a token with access to the repositories (issues and pull requests: read and write) and set GITHUB_TOKEN", "token: %v", err)
		return
	}
	d.clock("GitHub", resp)
	d.ok("github", "token of %s", user.Login)
	if d.repo == "" {
		return
	}
	var repo struct {
		FullName    string `json:"full_name"`
		Permissions struct{ Push, Admin bool }
	}
	if _, err := d.call(ctx, http.MethodGet, api+"repos/"+d.repo, token.Reveal(), nil, &repo); err != nil {
		d.fail("github repo", fmt.Sprintf("give the token access to %s", d.repo), "%s: %v", d.repo, err)
		return
	}
	if !repo.Permissions.Push {
		d.fail("github repo", fmt.Sprintf("give the token write access to %s's issues and pull requests", d.repo), "%s: the token cannot write", d.repo)
		return
	}
	d.ok("github repo", "%s: the token can write", repo.FullName)
	var hooks []struct {
		Active bool
		Events []string
		Config struct {
			URL         string `json:"url"`
			ContentType string `json:"content_type"`
		}
	}
	if _, err := d.call(ctx, http.MethodGet, api+"repos/"+d.repo+"/hooks", token.Reveal(), nil, &hooks); err != nil {
		d.fail("github webhook", "give the token the webhooks (admin:repo_hook) permission, or check the webhook by hand", "%s hooks: %v", d.repo, err)
		return
	}
	want := d.publicURL + "/webhooks/github"
	for _, h := range hooks {
		if d.publicURL != "" && h.Config.URL != want {
			continue
		}
		if !strings.HasSuffix(h.Config.URL, "/webhooks/github") {
			continue
		}
		if !h.Active || h.Config.ContentType != "json" {
			d.fail("github webhook", "run `relay setup github` (or set the webhook active, content type application/json)",
				"%s: webhook %s is inactive or not JSON (%s)", d.repo, h.Config.URL, h.Config.ContentType)
			return
		}
		d.ok("github webhook", "%s sends %s to %s", d.repo, strings.Join(h.Events, ","), h.Config.URL)
		return
	}
	d.fail("github webhook", fmt.Sprintf("run `relay setup github --repo %s --public-url URL`", d.repo), "%s has no webhook to %s", d.repo, cmpOrURL(want, ".../webhooks/github"))
}

// models checks an OpenAI-compatible endpoint lists model (and, deep, that
// one tiny call answers).
func (d *doctor) models(ctx context.Context, name, base string, key secret.Value, model, baseVar, modelVar string) {
	base = strings.TrimRight(base, "/")
	var list struct{ Data []struct{ ID string } }
	if _, err := d.call(ctx, http.MethodGet, base+"/models", key.Reveal(), nil, &list); err != nil {
		d.fail(name, fmt.Sprintf("check %s (an OpenAI-compatible base URL, usually ending in /v1) and its API key", baseVar), "%v", err)
		return
	}
	ids := make([]string, len(list.Data))
	for i, m := range list.Data {
		ids[i] = m.ID
	}
	if model != "" && !slices.Contains(ids, model) {
		d.fail(name, fmt.Sprintf("set %s to one of: %s", modelVar, clipList(ids, 8)), "%s does not list the model %q", base, model)
		return
	}
	if d.deep {
		var body string
		path := "/chat/completions"
		if name == "embeddings" {
			path = "/embeddings"
			body = fmt.Sprintf(`{"model":%q,"input":"relay doctor"}`, model)
		} else {
			body = fmt.Sprintf(`{"model":%q,"max_tokens":1,"messages":[{"role":"user","content":"Say ok."}]}`, model)
		}
		if _, err := d.call(ctx, http.MethodPost, base+path, key.Reveal(), strings.NewReader(body), nil); err != nil {
			d.fail(name, fmt.Sprintf("check the model %q and the key's rights", model), "one tiny call: %v", err)
			return
		}
	}
	d.ok(name, "%s lists %s%s", base, cmpOrURL(model, "models"), map[bool]string{true: "; one tiny call answered", false: ""}[d.deep])
}

func clipList(s []string, n int) string {
	if len(s) > n {
		return strings.Join(s[:n], ", ") + ", ..."
	}
	return strings.Join(s, ", ")
}

// public checks the public URL reaches this relay: its /healthz answers.
func (d *doctor) public(ctx context.Context) {
	u := d.publicURL + "/healthz"
	if _, err := d.call(ctx, http.MethodGet, u, "", nil, nil); err != nil {
		d.fail("public url", "expose RELAY_HTTP_ADDR at the public URL (a tunnel or reverse proxy forwarding /webhooks/ and /healthz)", "%v", err)
		return
	}
	d.ok("public url", "%s answers", u)
}
