package cli

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	gh "github.com/google/go-github/v60/github"
	"gopkg.in/yaml.v3"

	githubmapper "github.com/relaystation/relay/mappers/github"
)

func init() {
	registerCommand(&command{
		name:    "setup",
		usage:   "slack|github ...",
		summary: "connect Slack (prints the app manifest) or GitHub (creates the webhook)",
		run: func(ctx context.Context, a *app, args []string) error {
			return subcommands{"slack": runSetupSlack, "github": runSetupGitHub}.run(ctx, a, "setup", setupUsage, args)
		},
	})
}

const setupUsage = `usage:
  relay setup slack --public-url URL | --socket-mode
      print the Slack app manifest and the link that creates the app from it
  relay setup github --repo OWNER/NAME | --org ORG --public-url URL [--print]
      create or update the GitHub webhook (GITHUB_TOKEN, GITHUB_WEBHOOK_SECRET); --print says what to enter by hand`

// ---- Slack ----

// slackMethodScopes are the Slack Web API methods the relay calls, with the
// bot scopes each needs (https://api.slack.com/methods); the manifest grants
// them all. A test finds the methods in the code and fails on one missing here.
var slackMethodScopes = map[string][]string{
	"auth.test":                    nil,
	"apps.connections.open":        nil, // Socket Mode: the app-level token's connections:write
	"chat.postMessage":             {"chat:write"},
	"chat.update":                  {"chat:write"},
	"chat.postEphemeral":           {"chat:write"},
	"conversations.replies":        {"channels:history", "groups:history", "im:history", "mpim:history"},
	"conversations.history":        {"channels:history", "groups:history", "im:history", "mpim:history"},
	"files.getUploadURLExternal":   {"files:write"},
	"files.completeUploadExternal": {"files:write"},
	"usergroups.users.list":        {"usergroups:read"},
	"views.open":                   nil, // a trigger_id is the permission
	"views.update":                 nil,
	"views.push":                   nil,
}

// slackBotEvents are the events the app subscribes to, with the scope each
// needs: mentions start tasks and code-block runs; messages feed hooks and
// thread context.
var slackBotEvents = []struct{ event, scope string }{
	{"app_mention", "app_mentions:read"},
	{"message.channels", "channels:history"},
	{"message.groups", "groups:history"},
	{"message.im", "im:history"},
	{"message.mpim", "mpim:history"},
}

// SlackScopes are the bot scopes the manifest grants: those of every method
// the relay calls and every event it subscribes to, and commands for /relay.
func SlackScopes() []string {
	set := map[string]bool{"commands": true}
	for _, scopes := range slackMethodScopes {
		for _, s := range scopes {
			set[s] = true
		}
	}
	for _, e := range slackBotEvents {
		set[e.scope] = true
	}
	out := make([]string, 0, len(set))
	for s := range set {
		out = append(out, s)
	}
	slices.Sort(out)
	return out
}

// slackManifest is a Slack app manifest (https://api.slack.com/reference/manifests).
type slackManifest struct {
	Metadata struct {
		Major int `yaml:"major_version"`
		Minor int `yaml:"minor_version"`
	} `yaml:"_metadata"`
	DisplayInformation struct {
		Name            string `yaml:"name"`
		Description     string `yaml:"description"`
		BackgroundColor string `yaml:"background_color"`
	} `yaml:"display_information"`
	Features struct {
		BotUser struct {
			DisplayName  string `yaml:"display_name"`
			AlwaysOnline bool   `yaml:"always_online"`
		} `yaml:"bot_user"`
		SlashCommands []slackCommand `yaml:"slash_commands"`
	} `yaml:"features"`
	OAuthConfig struct {
		Scopes struct {
			Bot []string `yaml:"bot"`
		} `yaml:"scopes"`
	} `yaml:"oauth_config"`
	Settings struct {
		EventSubscriptions struct {
			RequestURL string   `yaml:"request_url,omitempty"`
			BotEvents  []string `yaml:"bot_events"`
		} `yaml:"event_subscriptions"`
		Interactivity struct {
			IsEnabled  bool   `yaml:"is_enabled"`
			RequestURL string `yaml:"request_url,omitempty"`
		} `yaml:"interactivity"`
		OrgDeployEnabled     bool `yaml:"org_deploy_enabled"`
		SocketModeEnabled    bool `yaml:"socket_mode_enabled"`
		TokenRotationEnabled bool `yaml:"token_rotation_enabled"`
	} `yaml:"settings"`
}

type slackCommand struct {
	Command      string `yaml:"command"`
	URL          string `yaml:"url,omitempty"`
	Description  string `yaml:"description"`
	UsageHint    string `yaml:"usage_hint"`
	ShouldEscape bool   `yaml:"should_escape"`
}

// buildSlackManifest fills the manifest for a relay at publicURL, or for
// Socket Mode (no URLs) when publicURL is empty.
func buildSlackManifest(publicURL string) slackManifest {
	var m slackManifest
	m.Metadata.Major, m.Metadata.Minor = 1, 1
	m.DisplayInformation.Name = "relay"
	m.DisplayInformation.Description = "Answers from your tools and team, approved in Slack."
	m.DisplayInformation.BackgroundColor = "#1d3557"
	m.Features.BotUser.DisplayName = "relay"
	m.Features.BotUser.AlwaysOnline = true
	base := strings.TrimSuffix(publicURL, "/")
	cmd := slackCommand{Command: "/relay", Description: "Ask the relay", UsageHint: "[question]"}
	if base != "" {
		cmd.URL = base + "/webhooks/slack/commands"
		m.Settings.EventSubscriptions.RequestURL = base + "/webhooks/slack/events"
		m.Settings.Interactivity.RequestURL = base + "/webhooks/slack/interactions"
	}
	m.Features.SlashCommands = []slackCommand{cmd}
	m.OAuthConfig.Scopes.Bot = SlackScopes()
	for _, e := range slackBotEvents {
		m.Settings.EventSubscriptions.BotEvents = append(m.Settings.EventSubscriptions.BotEvents, e.event)
	}
	m.Settings.Interactivity.IsEnabled = true
	m.Settings.SocketModeEnabled = base == ""
	return m
}

// SlackManifestYAML is the manifest as YAML (see buildSlackManifest).
func SlackManifestYAML(publicURL string) (string, error) {
	b, err := yaml.Marshal(buildSlackManifest(publicURL))
	return string(b), err
}

// slackCreateAppLink is the link that opens Slack's "create an app" with the
// manifest filled in.
func slackCreateAppLink(manifest string) string {
	return "https://api.slack.com/apps?new_app=1&manifest_yaml=" + url.QueryEscape(manifest)
}

// publicBase checks a --public-url: an absolute http(s) URL without query.
func publicBase(raw string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" || (u.Scheme != "https" && u.Scheme != "http") || u.RawQuery != "" || u.Fragment != "" {
		return "", fmt.Errorf("--public-url %q: want the relay's public base URL, like https://relay.example.com", raw)
	}
	return strings.TrimSuffix(u.String(), "/"), nil
}

func runSetupSlack(_ context.Context, a *app, args []string) error {
	fs := a.flags("setup slack")
	public := fs.String("public-url", "", "the relay's public base URL (Slack posts to URL/webhooks/slack/...)")
	socket := fs.Bool("socket-mode", false, "no public URL: events and interactions over Socket Mode (SLACK_APP_TOKEN)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if (*public == "") == !*socket || fs.NArg() > 0 {
		return &exitError{code: 2, msg: "setup slack: give exactly one of --public-url URL and --socket-mode\n" + setupUsage}
	}
	base := ""
	if *public != "" {
		var err error
		if base, err = publicBase(*public); err != nil {
			return &exitError{code: 2, msg: err.Error()}
		}
	}
	manifest, err := SlackManifestYAML(base)
	if err != nil {
		return err
	}
	fmt.Fprint(a.stdout, "# Slack app manifest for the relay (also in deploy/slack-app.yaml)\n"+manifest)
	fmt.Fprintf(a.stdout, `
Create the app from it (opens Slack with the manifest filled in):
  %s

Then:
  1. Install the app to your workspace, and invite the bot to the approvals channel (/invite @relay).
  2. In .env: SLACK_SIGNING_SECRET (Basic Information > Signing Secret), SLACK_BOT_TOKEN (OAuth & Permissions,
     xoxb-...), SLACK_APPROVAL_CHANNEL (the channel id, C...), SLACK_APPROVERS (user ids U..., groups S...).
`, slackCreateAppLink(manifest))
	if base == "" {
		fmt.Fprintln(a.stdout, "  3. Socket Mode: Basic Information > App-Level Tokens, a token with connections:write, as SLACK_APP_TOKEN.")
	} else {
		fmt.Fprintf(a.stdout, "  3. Slack verifies %s/webhooks/slack/events when the app is created: start the relay first.\n", base)
	}
	return nil
}

// ---- GitHub ----

// githubHookEvents are the events a webhook subscribes to: those the mapper
// builds from go-github's types.
func githubHookEvents() []string { return githubmapper.MappedEvents() }

// githubHookTarget is the repository or organisation whose webhook is set.
type githubHookTarget struct{ owner, repo, org string }

func (t githubHookTarget) String() string {
	if t.org != "" {
		return "organisation " + t.org
	}
	return "repository " + t.owner + "/" + t.repo
}

func (t githubHookTarget) list(ctx context.Context, c *gh.Client, opts *gh.ListOptions) ([]*gh.Hook, *gh.Response, error) {
	if t.org != "" {
		return c.Organizations.ListHooks(ctx, t.org, opts)
	}
	return c.Repositories.ListHooks(ctx, t.owner, t.repo, opts)
}

func (t githubHookTarget) create(ctx context.Context, c *gh.Client, h *gh.Hook) (*gh.Hook, *gh.Response, error) {
	if t.org != "" {
		return c.Organizations.CreateHook(ctx, t.org, h)
	}
	return c.Repositories.CreateHook(ctx, t.owner, t.repo, h)
}

func (t githubHookTarget) edit(ctx context.Context, c *gh.Client, id int64, h *gh.Hook) (*gh.Hook, *gh.Response, error) {
	if t.org != "" {
		return c.Organizations.EditHook(ctx, t.org, id, h)
	}
	return c.Repositories.EditHook(ctx, t.owner, t.repo, id, h)
}

func runSetupGitHub(ctx context.Context, a *app, args []string) error {
	fs := a.flags("setup github")
	repo := fs.String("repo", "", "OWNER/NAME: the repository's webhook")
	org := fs.String("org", "", "ORG: the organisation's webhook (every repository of it)")
	public := fs.String("public-url", "", "the relay's public base URL (GitHub posts to URL/webhooks/github)")
	printOnly := fs.Bool("print", false, "change nothing: print what to enter in GitHub's webhook form")
	if err := fs.Parse(args); err != nil {
		return err
	}
	var t githubHookTarget
	switch {
	case fs.NArg() > 0 || (*repo == "") == (*org == "") || *public == "":
		return &exitError{code: 2, msg: "setup github: give --repo OWNER/NAME or --org ORG, and --public-url URL\n" + setupUsage}
	case *org != "":
		t.org = *org
	default:
		owner, name, ok := strings.Cut(*repo, "/")
		if !ok || owner == "" || name == "" || strings.Contains(name, "/") {
			return &exitError{code: 2, msg: fmt.Sprintf("--repo %q: want OWNER/NAME", *repo)}
		}
		t.owner, t.repo = owner, name
	}
	base, err := publicBase(*public)
	if err != nil {
		return &exitError{code: 2, msg: err.Error()}
	}
	hookURL := base + "/webhooks/github"
	events := githubHookEvents()
	secretVal := a.env.Secret("GITHUB_WEBHOOK_SECRET")
	token := a.env.Secret("GITHUB_TOKEN")
	apiURL := a.env.URL("GITHUB_API_URL", "http", "https")
	if err := a.env.Err(); err != nil {
		return err
	}
	if *printOnly {
		settings := "https://github.com/" + t.owner + "/" + t.repo + "/settings/hooks/new"
		if t.org != "" {
			settings = "https://github.com/organizations/" + t.org + "/settings/hooks/new"
		}
		secretNote := "the value of GITHUB_WEBHOOK_SECRET in your .env"
		if !secretVal.IsSet() {
			secretNote = "GITHUB_WEBHOOK_SECRET is not set: run `relay init`, or set it to a long random string, and enter the same"
		}
		fmt.Fprintf(a.stdout, `In GitHub, %s (Settings > Webhooks > Add webhook):
  Payload URL:   %s
  Content type:  application/json
  Secret:        %s
  SSL verification: enabled
  Which events:  Let me select individual events:
                 %s
  Active:        yes
`, settings, hookURL, secretNote, strings.Join(events, ", "))
		return nil
	}
	if !secretVal.IsSet() {
		return errors.New("GITHUB_WEBHOOK_SECRET is not set: run `relay init` (it generates one) or set it, then run this again")
	}
	if !token.IsSet() {
		return errors.New("GITHUB_TOKEN is not set: it needs admin:repo_hook (or admin:org_hook for --org); or use --print and enter the webhook by hand")
	}
	c := gh.NewClient(&http.Client{Timeout: 30 * time.Second}).WithAuthToken(token.Reveal())
	if apiURL != "" {
		u, _ := url.Parse(apiURL)
		if !strings.HasSuffix(u.Path, "/") {
			u.Path += "/"
		}
		c.BaseURL = u
	}
	want := &gh.Hook{
		Config: &gh.HookConfig{URL: gh.String(hookURL), ContentType: gh.String("json"),
			Secret: gh.String(secretVal.Reveal()), InsecureSSL: gh.String("0")},
		Events: events,
		Active: gh.Bool(true),
	}
	existing, err := findHook(ctx, c, t, hookURL)
	if err != nil {
		return githubSetupError(t, err)
	}
	if existing == nil {
		if t.org == "" {
			want.Name = gh.String("web")
		}
		h, _, err := t.create(ctx, c, want)
		if err != nil {
			return githubSetupError(t, err)
		}
		fmt.Fprintf(a.stdout, "created the webhook %d of %s: %s, json, %d events, the secret of GITHUB_WEBHOOK_SECRET\n",
			h.GetID(), t, hookURL, len(events))
		return nil
	}
	what := "its events, content type and secret were already right; the secret was set again"
	if !sameHook(existing, events) {
		what = "events, content type json, secret and active set"
	}
	if _, _, err := t.edit(ctx, c, existing.GetID(), want); err != nil {
		return githubSetupError(t, err)
	}
	fmt.Fprintf(a.stdout, "updated the webhook %d of %s (%s): %s\n", existing.GetID(), t, hookURL, what)
	return nil
}

// findHook is the webhook of t that posts to hookURL, or nil.
func findHook(ctx context.Context, c *gh.Client, t githubHookTarget, hookURL string) (*gh.Hook, error) {
	opts := &gh.ListOptions{PerPage: 100}
	for {
		hooks, resp, err := t.list(ctx, c, opts)
		if err != nil {
			return nil, err
		}
		for _, h := range hooks {
			if h.Config != nil && strings.TrimSuffix(h.Config.GetURL(), "/") == hookURL {
				return h, nil
			}
		}
		if resp == nil || resp.NextPage == 0 {
			return nil, nil
		}
		opts.Page = resp.NextPage
	}
}

// sameHook reports whether h already has the events, JSON and is active
// (GitHub never shows the secret, so it is always set again).
func sameHook(h *gh.Hook, events []string) bool {
	have := slices.Clone(h.Events)
	slices.Sort(have)
	return slices.Equal(have, events) && h.Config.GetContentType() == "json" && h.GetActive() &&
		h.Config.GetInsecureSSL() != "1"
}

// githubSetupError says what to do about a failed API call.
func githubSetupError(t githubHookTarget, err error) error {
	var re *gh.ErrorResponse
	if errors.As(err, &re) && re.Response != nil {
		switch re.Response.StatusCode {
		case http.StatusUnauthorized:
			return fmt.Errorf("GitHub refused GITHUB_TOKEN (401 %s): is it valid and unexpired?", re.Message)
		case http.StatusNotFound, http.StatusForbidden:
			scope := "admin:repo_hook (fine-grained: Webhooks read and write)"
			if t.org != "" {
				scope = "admin:org_hook (fine-grained: organisation Webhooks read and write)"
			}
			return fmt.Errorf("GitHub answered %d for the webhooks of %s: does it exist, and may GITHUB_TOKEN administer its webhooks (%s)? Or use --print",
				re.Response.StatusCode, t, scope)
		}
	}
	return fmt.Errorf("GitHub webhooks of %s: %w", t, err)
}
