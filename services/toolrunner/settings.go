package toolrunner

import (
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"time"

	"github.com/relaystation/relay/config"
	"github.com/relaystation/relay/secret"
	"github.com/relaystation/relay/tools"
	"github.com/relaystation/relay/tools/mcpconfig"
)

// KnownSecrets are the variables whose values are redacted from tool results
// whenever they are set (RELAY_REDACT_SECRETS adds more).
var KnownSecrets = []string{
	"GITHUB_TOKEN", "GITHUB_WEBHOOK_SECRET", "SLACK_BOT_TOKEN", "SLACK_APP_TOKEN", "SLACK_SIGNING_SECRET",
	"SENTRY_TOKEN", "SENTRY_CLIENT_SECRET", "OPENPROJECT_TOKEN", "OPENPROJECT_WEBHOOK_SECRET", "LLM_API_KEY",
}

// Settings are the tool runner's settings, shared by the service and the
// `relay mcp` operator commands.
type Settings struct {
	// ConfigPath is the mcp.json read (./mcp.json unless RELAY_MCP_CONFIG).
	ConfigPath string
	Servers    []mcpconfig.Server
	// Invalid are the entries of ConfigPath that did not validate (skipped);
	// Notes the file's information lines (keys of other clients ignored).
	Invalid []mcpconfig.Invalid
	Notes   []string
	Policy  *mcpconfig.Policy
	// PolicySet is false when RELAY_POLICY is unset (the default policy
	// grants nothing).
	PolicySet bool
	// Runner is the runner's configuration, without Logger and Registerer.
	Runner tools.Config
	// DataDir is RELAY_DATA_DIR (${dataDir} in mcp.json).
	DataDir string
	// NoticeChannel is the Slack channel of auto-disable / re-enable notices
	// (RELAY_OPS_CHANNEL, else SLACK_APPROVAL_CHANNEL).
	NoticeChannel string
	// OAuth are the settings of remote servers behind OAuth (docs/oauth.md).
	OAuth OAuthSettings
}

// OAuthSettings are RELAY_SECRET_KEY (or _FILE), RELAY_OAUTH_REDIRECT_URL
// and RELAY_OAUTH_CLIENT_METADATA_URL.
type OAuthSettings struct {
	// SecretKey encrypts the stored OAuth tokens (Sealer).
	SecretKey secret.Value
	// RedirectURL is where `relay mcp login` takes the redirect; "" is a
	// free loopback port.
	RedirectURL string
	// ClientMetadataURL is the relay's Client ID Metadata Document URL.
	ClientMetadataURL string
}

// Sealer is the token encryption of the settings' key (ErrNoSecretKey
// when it is unset).
func (o OAuthSettings) Sealer() (*tools.Sealer, error) { return tools.NewSealer(o.SecretKey) }

// configPathForStatus is the mcp.json path a running runner reports:
// absolute, so `relay mcp list` run elsewhere names the right file.
func configPathForStatus(p string) string {
	if abs, err := filepath.Abs(p); err == nil {
		return abs
	}
	return p
}

// ReadSettings reads RELAY_DATA_DIR, RELAY_MCP_CONFIG, RELAY_POLICY,
// RELAY_AUDIT_LOG, RELAY_MCP_HEALTH_INTERVAL and RELAY_REDACT_SECRETS (and
// the KnownSecrets), loading both files. Problems are recorded in env.
func ReadSettings(env *config.Env) *Settings {
	dataDir := env.String("RELAY_DATA_DIR", "./data")
	path := env.String("RELAY_MCP_CONFIG", "")
	explicit := path != ""
	if !explicit {
		path = "./mcp.json"
	}
	ts := &Settings{ConfigPath: path, DataDir: dataDir}
	f, err := mcpconfig.LoadFile(path, mcpconfig.Options{Lookup: os.LookupEnv, DataDir: dataDir})
	switch {
	case err == nil:
		// A bad entry fails alone: it is listed as invalid and skipped.
		ts.Servers, ts.Invalid, ts.Notes = f.Servers, f.Invalid, f.Notes
	case errors.Is(err, mcpconfig.ErrNotFound) && !explicit:
		// No default mcp.json: no servers.
	default:
		env.Failf("RELAY_MCP_CONFIG", "%v", err)
	}
	ts.Policy = mcpconfig.DefaultPolicy()
	if p := env.String("RELAY_POLICY", ""); p != "" {
		pol, err := mcpconfig.LoadPolicy(p)
		if err != nil {
			env.Failf("RELAY_POLICY", "%v", err)
		} else {
			ts.Policy, ts.PolicySet = pol, true
		}
	}
	if ts.PolicySet {
		names := make([]string, 0, len(ts.Servers)+len(ts.Invalid))
		for _, s := range ts.Servers {
			names = append(names, s.Name)
		}
		for _, iv := range ts.Invalid {
			names = append(names, iv.ID) // configured, if not valid now
		}
		if err := ts.Policy.CheckServers(names); err != nil {
			env.Failf("RELAY_POLICY", "%v", err)
		}
	}
	var secrets []secret.Value
	for _, name := range slices.Concat(KnownSecrets, env.List("RELAY_REDACT_SECRETS")) {
		if v := env.Secret(name); v.IsSet() {
			secrets = append(secrets, v)
		}
	}
	ts.OAuth = readOAuth(env, ts.Servers)
	if ts.OAuth.SecretKey.IsSet() {
		secrets = append(secrets, ts.OAuth.SecretKey)
	}
	ts.NoticeChannel = env.String("RELAY_OPS_CHANNEL", env.String("SLACK_APPROVAL_CHANNEL", ""))
	if ts.NoticeChannel != "" && !validChannelID(ts.NoticeChannel) {
		env.Failf("RELAY_OPS_CHANNEL", "%q is not a Slack channel id (C…, G…, D…)", ts.NoticeChannel)
	}
	ts.Runner = tools.Config{
		Servers:        ts.Servers,
		ConfigPath:     configPathForStatus(path),
		Invalid:        InvalidEntries(ts.Invalid),
		Policy:         ts.Policy,
		AuditPath:      env.String("RELAY_AUDIT_LOG", filepath.Join(dataDir, "audit", "tools.jsonl")),
		HealthInterval: env.Duration("RELAY_MCP_HEALTH_INTERVAL", 30*time.Second, time.Second, time.Hour),
		DisableAfter:   env.Int("RELAY_MCP_DISABLE_AFTER", 3, 1, 100),
		MaxQuestions:   env.Int("RELAY_LIMIT_QUESTIONS_PER_CALL", tools.DefaultMaxQuestions, 1, 100),
		Redactor:       tools.NewRedactor(secrets...),
		BaseEnv:        tools.BaseEnvFrom(os.Environ()),
	}
	return ts
}

// channelRE is a Slack conversation id (C…, G… or D…), as the approvals
// worker checks its channels.
var channelRE = regexp.MustCompile(`^[CGD][A-Z0-9]{2,}$`)

func validChannelID(s string) bool { return channelRE.MatchString(s) }

// InvalidEntries are invalid mcp.json entries as the runner's status
// reports them.
func InvalidEntries(invalid []mcpconfig.Invalid) []tools.InvalidEntry {
	var out []tools.InvalidEntry
	for _, iv := range invalid {
		out = append(out, tools.InvalidEntry{Name: iv.Name, ID: iv.ID, Reason: iv.Reason()})
	}
	return out
}

// readOAuth reads the OAuth settings. RELAY_SECRET_KEY is required only
// when an entry declares an OAuth login (an "oauth" object without the
// client_credentials grant, whose tokens are not stored).
func readOAuth(env *config.Env, servers []mcpconfig.Server) OAuthSettings {
	o := OAuthSettings{
		SecretKey:         env.Secret("RELAY_SECRET_KEY"),
		RedirectURL:       env.URL("RELAY_OAUTH_REDIRECT_URL", "http", "https"),
		ClientMetadataURL: env.URL("RELAY_OAUTH_CLIENT_METADATA_URL", "https"),
	}
	if o.SecretKey.IsSet() {
		if _, err := o.Sealer(); err != nil {
			env.Failf("RELAY_SECRET_KEY", "shorter than %d characters (make one with `openssl rand -base64 32`)", tools.MinSecretKeyLen)
		}
		return o
	}
	for _, s := range servers {
		if s.OAuth != nil && s.OAuth.Grant != mcpconfig.GrantClientCredentials && !s.Disabled {
			env.Failf("RELAY_SECRET_KEY", "required: server %s in mcp.json logs in with OAuth and its tokens are stored encrypted with this key (or set RELAY_SECRET_KEY_FILE; make one with `openssl rand -base64 32`)", s.Name)
			break
		}
	}
	return o
}
