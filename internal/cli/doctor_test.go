package cli

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/relaystation/relay/bus/bustest"
	"github.com/relaystation/relay/internal/fakes"
	"github.com/relaystation/relay/internal/slackscopes"
	"github.com/relaystation/relay/internal/testenv"
)

// doctorWorld is what `relay doctor` checks, every part healthy: an
// embedded bus, the machine's Redis and Postgres, fake Slack, GitHub and
// model endpoints, and a public URL answering /healthz.
type doctorWorld struct {
	env    map[string]string
	args   []string
	slack  *fakes.Slack
	github *fakes.GitHub
	llm    *fakes.LLM
	public *httptest.Server
	status int // the public URL's /healthz status
}

func newDoctorWorld(t *testing.T, natsURL string) *doctorWorld {
	t.Helper()
	w := &doctorWorld{slack: fakes.NewSlack(t), github: fakes.NewGitHub(t), status: http.StatusOK}
	w.llm = fakes.NewLLM(t, func(*fakes.ChatRequest) fakes.Reply { return fakes.Reply{Text: "ok"} })
	w.public = httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) { rw.WriteHeader(w.status) }))
	t.Cleanup(w.public.Close)
	w.slack.SetScopes(strings.Join(slackscopes.Bot, ","))
	w.slack.SetMember("C0APPROVALS", true)
	w.github.SetRepo("acme/widgets", &fakes.Repo{Push: true, Hooks: []fakes.Hook{
		{URL: w.public.URL + "/webhooks/github", ContentType: "json", Active: true, Events: []string{"issues", "issue_comment"}}}})
	w.env = map[string]string{
		"RELAY_DATA_DIR":         t.TempDir(),
		"RELAY_MCP_CONFIG":       writeTemp(t, "mcp.json", `{"mcpServers": {}}`),
		"NATS_URL":               natsURL,
		"REDIS_URL":              testenv.Getenv("REDIS_URL", "redis://127.0.0.1:6379"),
		"DATABASE_URL":           os.Getenv("DATABASE_URL"),
		"GITHUB_WEBHOOK_SECRET":  "0123456789abcdef0123",
		"SLACK_BOT_TOKEN":        "xoxb-doctor-test",
		"SLACK_API_URL":          w.slack.URL(),
		"SLACK_APPROVAL_CHANNEL": "C0APPROVALS",
		"GITHUB_TOKEN":           "ghp_doctortest",
		"GITHUB_API_URL":         w.github.URL(),
		"LLM_BASE_URL":           w.llm.URL(),
		"LLM_MODEL":              "fake-model",
		"EMBEDDINGS_BASE_URL":    w.llm.URL(),
		"EMBEDDINGS_MODEL":       "fake-model",
	}
	if w.env["DATABASE_URL"] == "" {
		testenv.Missing(t, "DATABASE_URL is not set; point it at a Postgres with pgvector")
	}
	w.args = []string{"doctor", "-json", "--deep", "--repo", "acme/widgets", "--public-url", w.public.URL}
	return w
}

// run runs doctor and returns its exit code and the names of the failed checks.
func (w *doctorWorld) run(t *testing.T) (int, []string, []check) {
	t.Helper()
	code, out, stderr := cliRunner(t, w.env)(w.args...)
	var checks []check
	if err := json.Unmarshal([]byte(out), &checks); err != nil {
		t.Fatalf("doctor -json: %v\n%s%s", err, out, stderr)
	}
	var failed []string
	for _, c := range checks {
		if !c.OK {
			failed = append(failed, c.Name)
			if c.Fix == "" {
				t.Errorf("failed check %s says nothing to do", c.Name)
			}
		}
	}
	return code, failed, checks
}

// TestDoctor: every part healthy passes (exit 0, one line each); each
// check, made to fail once, fails alone (exit 1) and says what to do.
func TestDoctor(t *testing.T) {
	t.Parallel()
	natsURL := bustest.Embedded(t).ClientURL()
	w := newDoctorWorld(t, natsURL)
	code, failed, checks := w.run(t)
	if code != 0 || len(failed) > 0 {
		t.Fatalf("healthy: exit %d, failed %v, want 0 and none: %+v", code, failed, checks)
	}
	var names []string
	for _, c := range checks {
		names = append(names, c.Name)
	}
	for _, want := range []string{"secrets", "nats", "redis", "postgres", "slack", "slack scopes", "slack channel", "clock", "github", "github repo", "github webhook", "llm", "embeddings", "public url"} {
		if !slices.Contains(names, want) {
			t.Errorf("healthy: no %q check in %v", want, names)
		}
	}
	// The text form: one line each and a summary.
	_, out, _ := cliRunner(t, w.env)(slices.DeleteFunc(slices.Clone(w.args), func(s string) bool { return s == "-json" })...)
	if !strings.Contains(out, "ok    nats") || !strings.Contains(out, "failed") {
		t.Errorf("text form:\n%s", out)
	}

	for name, tc := range map[string]struct {
		breakIt func(w *doctorWorld)
		want    string
		says    string
	}{
		"short secret":       {func(w *doctorWorld) { w.env["GITHUB_WEBHOOK_SECRET"] = "short" }, "secret github", "openssl rand"},
		"no secret":          {func(w *doctorWorld) { delete(w.env, "GITHUB_WEBHOOK_SECRET") }, "secrets", "GITHUB_WEBHOOK_SECRET"},
		"nats down":          {func(w *doctorWorld) { w.env["NATS_URL"] = "nats://" + freeAddr(t) }, "nats", "relay serve"},
		"redis down":         {func(w *doctorWorld) { w.env["REDIS_URL"] = "redis://" + freeAddr(t) }, "redis", "REDIS_URL"},
		"postgres down":      {func(w *doctorWorld) { w.env["DATABASE_URL"] = "postgres://postgres@" + freeAddr(t) + "/test" }, "postgres", "DATABASE_URL"},
		"no vector":          {func(w *doctorWorld) { w.env["DATABASE_URL"] = withDB(t, w.env["DATABASE_URL"], "template1") }, "postgres", "CREATE EXTENSION vector"},
		"slack token":        {func(w *doctorWorld) { w.slack.Fail("auth.test", "invalid_auth") }, "slack", "SLACK_BOT_TOKEN"},
		"slack scopes":       {func(w *doctorWorld) { w.slack.SetScopes("chat:write,commands") }, "slack scopes", "reinstall"},
		"bot not in channel": {func(w *doctorWorld) { w.slack.SetMember("C0APPROVALS", false) }, "slack channel", "/invite"},
		"clock 6 min off":    {func(w *doctorWorld) { w.slack.SetClockSkew(6 * time.Minute) }, "clock", "NTP"},
		"github token":       {func(w *doctorWorld) { w.env["GITHUB_API_URL"] = w.github.URL() + "nope/" }, "github", "GITHUB_TOKEN"},
		"github repo":        {func(w *doctorWorld) { w.github.SetRepo("acme/widgets", nil) }, "github repo", "access to acme/widgets"},
		"github read-only":   {func(w *doctorWorld) { w.github.SetRepo("acme/widgets", &fakes.Repo{}) }, "github repo", "write access"},
		"github no webhook":  {func(w *doctorWorld) { w.github.SetRepo("acme/widgets", &fakes.Repo{Push: true}) }, "github webhook", "relay setup github"},
		"llm model":          {func(w *doctorWorld) { w.env["LLM_MODEL"] = "gpt-missing" }, "llm", "fake-model"},
		"embeddings 404":     {func(w *doctorWorld) { w.env["EMBEDDINGS_BASE_URL"] = w.llm.URL() + "/nope" }, "embeddings", "EMBEDDINGS_BASE_URL"},
		"public url":         {func(w *doctorWorld) { w.status = http.StatusBadGateway }, "public url", "reverse proxy"},
		"mcp server down": {func(w *doctorWorld) {
			w.env["RELAY_MCP_CONFIG"] = writeTemp(t, "mcp.json", `{"mcpServers": {"gone": {"type": "http", "url": "http://`+freeAddr(t)+`/mcp"}}}`)
		}, "mcp gone", "relay mcp test gone"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			w := newDoctorWorld(t, natsURL)
			tc.breakIt(w)
			code, failed, checks := w.run(t)
			if code != 1 || !slices.Equal(failed, []string{tc.want}) {
				t.Fatalf("exit %d, failed %v, want 1 and [%s]: %+v", code, failed, tc.want, checks)
			}
			for _, c := range checks {
				if c.Name == tc.want && !c.OK && !strings.Contains(c.Fix+c.Detail, tc.says) {
					t.Errorf("%s: %q -> %q does not say %q", c.Name, c.Detail, c.Fix, tc.says)
				}
			}
		})
	}
}

func withDB(t *testing.T, u, db string) string {
	t.Helper()
	p, err := url.Parse(u)
	if err != nil {
		t.Fatal(err)
	}
	p.Path = "/" + db
	return p.String()
}
