package cli

import (
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/relaystation/relay/internal/fakes"
	githubmapper "github.com/relaystation/relay/mappers/github"
)

// manifestOf cuts the manifest out of `relay setup slack`'s output.
func manifestOf(t *testing.T, out string) map[string]any {
	t.Helper()
	doc, _, ok := strings.Cut(out, "\nCreate the app")
	if !ok {
		t.Fatalf("no link after the manifest:\n%s", out)
	}
	var m map[string]any
	if err := yaml.Unmarshal([]byte(doc), &m); err != nil {
		t.Fatalf("manifest is not YAML: %v\n%s", err, doc)
	}
	return m
}

func dig(m any, path ...string) any {
	for _, p := range path {
		mm, ok := m.(map[string]any)
		if !ok {
			return nil
		}
		m = mm[p]
	}
	return m
}

func strs(v any) []string {
	var out []string
	for _, x := range v.([]any) {
		out = append(out, x.(string))
	}
	return out
}

// The manifest printed for a public URL is the one in deploy/slack-app.yaml,
// with the URLs filled in, and the link carries it.
func TestSetupSlackPublicURL(t *testing.T) {
	run := cliRunner(t, map[string]string{})
	code, out, errOut := run("setup", "slack", "--public-url", "https://relay.example.com/")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	m := manifestOf(t, out)
	for path, want := range map[string]string{
		"settings/event_subscriptions/request_url": "https://relay.example.com/webhooks/slack/events",
		"settings/interactivity/request_url":       "https://relay.example.com/webhooks/slack/interactions",
	} {
		if got := dig(m, strings.Split(path, "/")...); got != want {
			t.Errorf("%s = %v, want %s", path, got, want)
		}
	}
	cmds := dig(m, "features", "slash_commands").([]any)
	if len(cmds) != 1 || dig(cmds[0], "command") != "/relay" || dig(cmds[0], "url") != "https://relay.example.com/webhooks/slack/commands" {
		t.Errorf("slash_commands = %v", cmds)
	}
	if dig(m, "settings", "socket_mode_enabled") != false || dig(m, "settings", "interactivity", "is_enabled") != true {
		t.Errorf("settings = %v", dig(m, "settings"))
	}

	var committed map[string]any
	if err := yaml.Unmarshal(readFile(t, filepath.Join("..", "..", "deploy", "slack-app.yaml")), &committed); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(m, committed) {
		t.Errorf("deploy/slack-app.yaml differs from `relay setup slack --public-url https://relay.example.com`:\n%v\nvs\n%v", committed, m)
	}

	i := strings.Index(out, "https://api.slack.com/apps?new_app=1&manifest_yaml=")
	if i < 0 {
		t.Fatalf("no create-app link:\n%s", out)
	}
	link, _, _ := strings.Cut(out[i:], "\n")
	u, err := url.Parse(link)
	if err != nil {
		t.Fatal(err)
	}
	var fromLink map[string]any
	if err := yaml.Unmarshal([]byte(u.Query().Get("manifest_yaml")), &fromLink); err != nil || !reflect.DeepEqual(fromLink, m) {
		t.Errorf("the link's manifest_yaml is not the manifest printed (%v)", err)
	}
}

func TestSetupSlackSocketMode(t *testing.T) {
	run := cliRunner(t, map[string]string{})
	code, out, errOut := run("setup", "slack", "--socket-mode")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	m := manifestOf(t, out)
	if dig(m, "settings", "socket_mode_enabled") != true {
		t.Error("socket_mode_enabled is not true")
	}
	if strings.Contains(strings.Split(out, "\nCreate the app")[0], "request_url") || strings.Contains(out, "/webhooks/") {
		t.Errorf("Socket Mode manifest names URLs:\n%s", out)
	}
	if !strings.Contains(out, "connections:write") {
		t.Error("no word of the app-level token")
	}
	for _, args := range [][]string{{}, {"--socket-mode", "--public-url", "https://x.test"}, {"--public-url", "relay.example.com"}} {
		if code, _, _ := run(append([]string{"setup", "slack"}, args...)...); code != 2 {
			t.Errorf("setup slack %v: exit %d, want 2", args, code)
		}
	}
}

// slackGoMethods maps the slack-go client methods the relay may call to the
// Slack Web API methods they call.
var slackGoMethods = map[string][]string{
	"PostMessage": {"chat.postMessage"}, "PostMessageContext": {"chat.postMessage"},
	"UpdateMessageContext":          {"chat.update"},
	"PostEphemeralContext":          {"chat.postEphemeral"},
	"OpenViewContext":               {"views.open"},
	"UpdateViewContext":             {"views.update"},
	"PushViewContext":               {"views.push"},
	"GetConversationRepliesContext": {"conversations.replies"},
	"GetConversationHistoryContext": {"conversations.history"},
	"GetUserGroupMembersContext":    {"usergroups.users.list"},
	"UploadFileContext":             {"files.getUploadURLExternal", "files.completeUploadExternal"},
	"AuthTestContext":               {"auth.test"},
}

var (
	slackCallRE     = regexp.MustCompile(`(?:\.api|\.Slack)\.([A-Z]\w*)\(`)
	slackLiteralRE  = regexp.MustCompile(`"((?:chat|conversations|usergroups|users|files|views|auth|apps|reactions|pins|bookmarks|team|emoji|bots)\.[a-zA-Z.]+)"`)
	slackGoImportRE = regexp.MustCompile(`"github.com/slack-go/slack(/[a-z]+)?"`)
)

// Every Slack method the relay's code calls (through slack-go, or named in
// an error) is known with its scopes, and deploy/slack-app.yaml grants them,
// and a scope for every bot event it subscribes to.
func TestSlackManifestGrantsWhatTheCodeCalls(t *testing.T) {
	root := filepath.Join("..", "..")
	called := map[string][]string{} // API method -> files
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch d.Name() {
			case "testdata", "node_modules", "fakes", ".git":
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		src := string(b)
		if !slackGoImportRE.MatchString(src) {
			return nil
		}
		rel, _ := filepath.Rel(root, path)
		for _, m := range slackCallRE.FindAllStringSubmatch(src, -1) {
			api, ok := slackGoMethods[m[1]]
			if !ok {
				t.Errorf("%s calls slack-go's %s: add it to slackGoMethods with the Slack methods it calls", rel, m[1])
			}
			for _, a := range api {
				called[a] = append(called[a], rel)
			}
		}
		for _, m := range slackLiteralRE.FindAllStringSubmatch(src, -1) {
			called[m[1]] = append(called[m[1]], rel)
		}
		if strings.Contains(src, "socketmode.New(") {
			called["apps.connections.open"] = append(called["apps.connections.open"], rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, must := range []string{"chat.postMessage", "chat.update", "conversations.replies", "usergroups.users.list", "files.completeUploadExternal"} {
		if called[must] == nil {
			t.Errorf("the scan found no call of %s: is it broken?", must)
		}
	}

	var committed struct {
		OAuth struct {
			Scopes struct {
				Bot []string `yaml:"bot"`
			} `yaml:"scopes"`
		} `yaml:"oauth_config"`
		Settings struct {
			Events struct {
				Bot []string `yaml:"bot_events"`
			} `yaml:"event_subscriptions"`
		} `yaml:"settings"`
	}
	if err := yaml.Unmarshal(readFile(t, filepath.Join(root, "deploy", "slack-app.yaml")), &committed); err != nil {
		t.Fatal(err)
	}
	granted := committed.OAuth.Scopes.Bot
	for method, files := range called {
		scopes, known := slackMethodScopes[method]
		if !known {
			t.Errorf("%v call Slack's %s: add it to slackMethodScopes (internal/cli/setup.go) with the scopes it needs", slices.Compact(files), method)
			continue
		}
		for _, s := range scopes {
			if !slices.Contains(granted, s) {
				t.Errorf("%s needs scope %s, which deploy/slack-app.yaml does not grant", method, s)
			}
		}
	}
	eventScope := map[string]string{"app_mention": "app_mentions:read", "message.channels": "channels:history",
		"message.groups": "groups:history", "message.im": "im:history", "message.mpim": "mpim:history"}
	for _, e := range committed.Settings.Events.Bot {
		s, ok := eventScope[e]
		if !ok {
			t.Errorf("bot event %s: which scope does it need?", e)
		} else if !slices.Contains(granted, s) {
			t.Errorf("bot event %s needs scope %s, not granted", e, s)
		}
	}
	if !slices.Contains(granted, "commands") {
		t.Error("/relay needs the commands scope")
	}
}

func setupGitHubEnv(g *fakes.GitHub) map[string]string {
	return map[string]string{"GITHUB_API_URL": g.URL(), "GITHUB_TOKEN": "ghp_admin", "GITHUB_WEBHOOK_SECRET": "s3cret-of-the-hook-0123456789"}
}

// `relay setup github` creates the webhook once; run again it finds it and
// leaves it as it is; a hook made by hand with form content type and one
// event is corrected.
func TestSetupGitHubCreatesThenUpdates(t *testing.T) {
	g := fakes.NewGitHub(t)
	g.AdminTokens = map[string]bool{"ghp_admin": true}
	env := setupGitHubEnv(g)
	run := cliRunner(t, env)
	code, out, errOut := run("setup", "github", "--repo", "octo/hello", "--public-url", "https://relay.example.com")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	hooks := g.Hooks()
	if len(hooks) != 1 {
		t.Fatalf("hooks = %+v", hooks)
	}
	h := hooks[0]
	if h.Of != "octo/hello" || h.URL != "https://relay.example.com/webhooks/github" || h.ContentType != "json" ||
		h.Secret != env["GITHUB_WEBHOOK_SECRET"] || !h.Active || h.InsecureSSL != "0" {
		t.Errorf("hook = %+v", h)
	}
	if !slices.Equal(h.Events, githubmapper.MappedEvents()) || !slices.Contains(h.Events, "issue_comment") {
		t.Errorf("events = %v, want the mapped ones %v", h.Events, githubmapper.MappedEvents())
	}
	if !strings.Contains(out, "created the webhook") || strings.Contains(out+errOut, env["GITHUB_WEBHOOK_SECRET"]) {
		t.Errorf("output (must not show the secret):\n%s%s", out, errOut)
	}

	code, out, _ = run("setup", "github", "--repo", "octo/hello", "--public-url", "https://relay.example.com")
	if code != 0 || len(g.Hooks()) != 1 || !strings.Contains(out, "already right") {
		t.Errorf("second run: exit %d, %d hooks:\n%s", code, len(g.Hooks()), out)
	}
	if got := g.Hooks()[0]; !reflect.DeepEqual(got, h) {
		t.Errorf("second run changed the hook: %+v", got)
	}

	// A hook entered by hand, wrongly, on an organisation.
	id := g.AddHook(fakes.Hook{Of: "octo", URL: "https://relay.example.com/webhooks/github", ContentType: "form",
		Events: []string{"push"}, Active: false})
	code, out, errOut = run("setup", "github", "--org", "octo", "--public-url", "https://relay.example.com")
	if code != 0 || !strings.Contains(out, "events, content type json") {
		t.Fatalf("org: exit %d: %s%s", code, out, errOut)
	}
	for _, h := range g.Hooks() {
		if h.ID == id && (h.ContentType != "json" || !h.Active || !slices.Equal(h.Events, githubmapper.MappedEvents()) || h.Secret == "") {
			t.Errorf("org hook not corrected: %+v", h)
		}
	}
	if n := len(g.Hooks()); n != 2 {
		t.Errorf("%d hooks, want 2", n)
	}
}

func TestSetupGitHubErrorsAndPrint(t *testing.T) {
	g := fakes.NewGitHub(t)
	g.AdminTokens = map[string]bool{"ghp_admin": true}
	env := setupGitHubEnv(g)
	env["GITHUB_TOKEN"] = "ghp_reader"
	run := cliRunner(t, env)
	code, _, errOut := run("setup", "github", "--repo", "octo/hello", "--public-url", "https://relay.example.com")
	if code != 1 || !strings.Contains(errOut, "admin:repo_hook") || strings.Contains(errOut, "ghp_reader") {
		t.Errorf("token without access: exit %d: %s", code, errOut)
	}
	delete(env, "GITHUB_WEBHOOK_SECRET")
	code, _, errOut = run("setup", "github", "--repo", "octo/hello", "--public-url", "https://relay.example.com")
	if code != 1 || !strings.Contains(errOut, "GITHUB_WEBHOOK_SECRET is not set") {
		t.Errorf("no secret: exit %d: %s", code, errOut)
	}
	for _, args := range [][]string{{"--repo", "octo"}, {"--repo", "octo/hello"}, {"--repo", "a/b", "--org", "c", "--public-url", "https://x.test"}} {
		if code, _, _ := run(append([]string{"setup", "github"}, args...)...); code != 2 {
			t.Errorf("setup github %v: exit %d, want 2", args, code)
		}
	}
	env["GITHUB_WEBHOOK_SECRET"] = "s3cret-of-the-hook-0123456789"
	code, out, _ := run("setup", "github", "--org", "octo", "--public-url", "https://relay.example.com", "--print")
	for _, want := range []string{"https://github.com/organizations/octo/settings/hooks/new", "https://relay.example.com/webhooks/github",
		"application/json", "GITHUB_WEBHOOK_SECRET", "issue_comment"} {
		if !strings.Contains(out, want) {
			t.Errorf("--print lacks %q:\n%s", want, out)
		}
	}
	if code != 0 || strings.Contains(out, "s3cret") || g.HookWrites() != 0 {
		t.Errorf("--print: exit %d, %d writes to GitHub, output:\n%s", code, g.HookWrites(), out)
	}
}
