package console

import (
	"net"
	"strings"
	"time"

	"github.com/relaystation/relay/config"
	"github.com/relaystation/relay/secret"
)

// DefaultAddr is the console's listen address when RELAY_CONSOLE_ADDR is unset.
const DefaultAddr = "127.0.0.1:8081"

// DefaultIdle is how long the console follows the bus after the last
// request for its envelopes when RELAY_CONSOLE_IDLE is unset: long enough
// for an operator going from page to page without a live page open, short
// enough that a console looked at now and then costs the relay little.
const DefaultIdle = 5 * time.Minute

// MinTokenLen is the shortest RELAY_CONSOLE_TOKEN the console starts with.
const MinTokenLen = 16

// Settings are the console's settings from the environment.
type Settings struct {
	// Config is the console's configuration, without Logger and the
	// collaborators the command layer wires.
	Config Config
}

// ReadSettings reads RELAY_CONSOLE_ADDR, RELAY_CONSOLE_TOKEN,
// RELAY_CONSOLE_OPERATORS (name=token pairs, a secret: also from
// RELAY_CONSOLE_OPERATORS_FILE), RELAY_CONSOLE_RECENT and RELAY_CONSOLE_IDLE.
// A non-loopback address without a token or operators is recorded in env,
// naming RELAY_CONSOLE_TOKEN.
func ReadSettings(env *config.Env) Settings {
	cfg := Config{
		Addr:  env.Addr("RELAY_CONSOLE_ADDR", DefaultAddr),
		Token: env.Secret("RELAY_CONSOLE_TOKEN"),
		// The Events page's memory: a bounded ring of the last envelopes.
		Recent: env.Int("RELAY_CONSOLE_RECENT", 2000, 10, 100_000),
		// How long it keeps following the bus, unlooked at.
		Idle: env.Duration("RELAY_CONSOLE_IDLE", DefaultIdle, time.Second, 24*time.Hour),
		// Where browsers reach it: the OAuth redirect, links sent in Slack.
		PublicURL: PublicURL(env),
	}
	if ops := env.Secret("RELAY_CONSOLE_OPERATORS"); ops.IsSet() {
		var err error
		if cfg.Operators, err = ParseOperators(ops.Reveal()); err != nil {
			env.Failf("RELAY_CONSOLE_OPERATORS", "%v", err)
		} else if err := checkOperators(cfg.Operators, cfg.Token); err != nil {
			env.Failf("RELAY_CONSOLE_OPERATORS", "%v", err)
		}
		// config.Env remembered the setting's whole value; each token is a
		// secret of its own wherever it shows up alone.
		for _, o := range cfg.Operators {
			secret.Remember(o.Token.Reveal())
		}
	}
	if !Loopback(cfg.Addr) && !cfg.Token.IsSet() && len(cfg.Operators) == 0 {
		env.Failf("RELAY_CONSOLE_TOKEN", "required: RELAY_CONSOLE_ADDR %q is not a loopback address, so the console needs a token to sign in with (or named operators in RELAY_CONSOLE_OPERATORS)", cfg.Addr)
	}
	if cfg.Token.IsSet() && len(cfg.Token.Reveal()) < MinTokenLen {
		env.Failf("RELAY_CONSOLE_TOKEN", "too short: it must be at least %d characters (it is %d); generate one with: openssl rand -hex 24", MinTokenLen, len(cfg.Token.Reveal()))
	}
	return Settings{Config: cfg}
}

// PublicURL is RELAY_CONSOLE_URL, the console as browsers reach it (the
// links `/relay connect` sends, the OAuth redirect /oauth/callback), or ""
// when unset (see DefaultPublicURL).
func PublicURL(env *config.Env) string {
	if u := env.URL("RELAY_CONSOLE_URL", "http", "https"); u != "" {
		return strings.TrimSuffix(u, "/")
	}
	return ""
}

// DefaultPublicURL is the console's URL on its listen address addr, for a
// console without RELAY_CONSOLE_URL.
func DefaultPublicURL(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "http://" + addr
	}
	if host == "" || host == "0.0.0.0" || host == "::" {
		host = "127.0.0.1"
	}
	return "http://" + net.JoinHostPort(host, port)
}

// Loopback reports whether the listen address addr binds to loopback only
// (127.0.0.0/8, ::1 or localhost); an empty host binds every interface.
func Loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil || host == "" {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
