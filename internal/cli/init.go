package cli

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

func init() {
	registerCommand(&command{
		name:    "init",
		usage:   "[-dir DIR]",
		summary: "write a starter .env (generated secrets), mcp.json, policy.yaml and hooks.yaml; never overwrites a file",
		run:     runInit,
	})
}

// starterFile is one file `relay init` writes.
type starterFile struct {
	name string
	mode fs.FileMode
	body func() (string, error)
}

// starterFiles are the files of a new relay folder, in the order written.
var starterFiles = []starterFile{
	{".env", 0o600, starterEnv},
	{"mcp.json", 0o644, func() (string, error) { return starterMCP, nil }},
	{"policy.yaml", 0o644, func() (string, error) { return starterPolicy, nil }},
	{"hooks.yaml", 0o644, func() (string, error) { return starterHooks, nil }},
}

func runInit(_ context.Context, a *app, args []string) error {
	flags := a.flags("init")
	dir := flags.String("dir", ".", "folder to write the files into")
	if err := flags.Parse(args); err != nil {
		return err
	}
	if flags.NArg() > 0 {
		return &exitError{code: 2, msg: fmt.Sprintf("init takes no arguments (got %q)", flags.Args())}
	}
	if err := os.MkdirAll(*dir, 0o755); err != nil {
		return err
	}
	wrote := 0
	for _, f := range starterFiles {
		path := filepath.Join(*dir, f.name)
		body, err := f.body()
		if err != nil {
			return err
		}
		switch err := writeNew(path, body, f.mode); {
		case errors.Is(err, fs.ErrExist):
			fmt.Fprintf(a.stdout, "kept    %s (it exists; not overwritten)\n", path)
		case err != nil:
			return err
		default:
			wrote++
			fmt.Fprintf(a.stdout, "wrote   %s\n", path)
		}
	}
	if wrote > 0 {
		fmt.Fprint(a.stdout, `
Next:
  set -a; . ./.env; set +a                         # or: docker compose up (it reads .env)
  relay setup slack --public-url https://YOUR-HOST   # the Slack app manifest; then fill SLACK_* in .env
  relay setup github --repo OWNER/NAME --public-url https://YOUR-HOST
  relay                                            # webhooks on :8080, console on http://127.0.0.1:8081/
`)
	}
	return nil
}

// writeNew creates path with body, failing with fs.ErrExist when it exists
// (O_EXCL: a file created meanwhile is not overwritten either).
func writeNew(path, body string, mode fs.FileMode) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return err
	}
	if _, err := f.WriteString(body); err != nil {
		f.Close()
		os.Remove(path)
		return err
	}
	if err := f.Close(); err != nil {
		os.Remove(path)
		return err
	}
	return nil
}

// randomHex is n random bytes in hex.
func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b) // never fails (crypto/rand)
	return hex.EncodeToString(b)
}

func starterEnv() (string, error) {
	key := make([]byte, 32)
	rand.Read(key)
	r := strings.NewReplacer(
		"{github}", randomHex(32),
		"{openproject}", randomHex(32),
		"{webhook}", "whsec_"+base64.StdEncoding.EncodeToString(key),
		"{console}", randomHex(24),
		"{secretkey}", base64.StdEncoding.EncodeToString([]byte(randomHex(24))),
	)
	return r.Replace(starterEnvTemplate), nil
}

const starterEnvTemplate = `# Written by ` + "`relay init`" + `. The secrets below were generated for this folder: keep this file
# out of version control. Every setting: docs/configuration.md.
# docker compose reads this file; for ` + "`relay`" + ` itself, export it first: set -a; . ./.env; set +a

# Where the relay listens: webhooks (and /healthz, /readyz, /metrics), and the operator console.
RELAY_HTTP_ADDR=:8080
RELAY_CONSOLE_ADDR=127.0.0.1:8081
# Sign-in token of the console (required when it listens beyond loopback).
RELAY_CONSOLE_TOKEN={console}

# GitHub: the webhook's secret (` + "`relay setup github`" + ` enters it for you), and a token that may comment
# on issues and pull requests (and administer the repository's webhooks, for relay setup github).
GITHUB_WEBHOOK_SECRET={github}
# GITHUB_TOKEN=

# Slack: create the app with ` + "`relay setup slack --public-url https://YOUR-HOST`" + `, install it, then copy:
# SLACK_SIGNING_SECRET=      Basic Information > Signing Secret
# SLACK_BOT_TOKEN=           OAuth & Permissions > Bot User OAuth Token (xoxb-...)
# SLACK_APPROVAL_CHANNEL=    the channel id (C...) where suggestions are approved; invite the bot there
# SLACK_APPROVERS=           user ids (U...) and user-group ids (S...) who may decide
# SLACK_APP_TOKEN=           Socket Mode only: an app-level token (xapp-...) with connections:write

# OpenProject: enter this secret in the webhook's form; OPENPROJECT_URL and OPENPROJECT_TOKEN to comment.
OPENPROJECT_WEBHOOK_SECRET={openproject}
# OPENPROJECT_URL=
# OPENPROJECT_TOKEN=

# Sentry: the integration's client secret comes from Sentry.
# SENTRY_CLIENT_SECRET=
# SENTRY_TOKEN=

# Generic signed webhooks the relay sends (Standard Webhooks); give the receiver this secret.
RELAY_WEBHOOK_SECRET={webhook}

# Encrypts the OAuth tokens the relay stores for MCP servers (at least 32 characters).
RELAY_SECRET_KEY={secretkey}

# The tools, who may call them, and hooks: the files written next to this one.
RELAY_MCP_CONFIG=./mcp.json
RELAY_POLICY=./policy.yaml
RELAY_HOOKS=./hooks.yaml

# The model: any OpenAI-compatible endpoint (Ollama, vLLM, llama.cpp, OpenAI). Unset: the agent is off.
# LLM_BASE_URL=http://127.0.0.1:11434/v1
# LLM_MODEL=
# LLM_API_KEY=
`

const starterMCP = `// MCP servers the tool runner starts (JSONC: comments and trailing commas are fine).
// The layout of VS Code's .vscode/mcp.json; Claude Desktop's "mcpServers" loads too.
// Check them with: relay mcp list, relay mcp test <server>. More: docs/tools.md.
{
  "servers": {
    // The MCP reference server (echo, get-sum, ...) over stdio; replace it with the servers you use.
    "everything": {
      "command": "npx",
      "args": ["-y", "@modelcontextprotocol/server-everything@2026.8.31", "stdio"]
    },
    // A remote server over streamable HTTP, its token from the environment:
    // "docs": {"url": "https://mcp.example.com/mcp", "headers": {"Authorization": "Bearer ${env:DOCS_TOKEN}"}},
  },
}
`

const starterPolicy = `# Which roles may call which tools (RELAY_POLICY). Without a policy every call is refused.
# Capabilities: <server>.<tool>, <server>.*, <server>.read, <server>.write, *.*. More: docs/tools.md.
roles:
  - role: agent
    description: the LLM agent (RELAY_AGENT_ROLE)
    capabilities: ["everything.*"]
  - role: hooks
    description: the hooks worker (hooks.yaml)
    capabilities: ["everything.echo"]
  - role: operator
    description: people running tools from Slack or GitHub code blocks; add them under members
    capabilities: ["*.*"]
    # members: {slack: ["U0123456789"], github: ["octocat"]}
# Limits per server: calls per second, at once, a timeout and a daily quota.
budgets:
  everything:
    rps: 10
    burst: 20
    concurrency: 5
    timeout: 30s
    daily_quota: 10000
limits:
  concurrency: 25
`

const starterHooks = `# Hooks: MCP tool calls fired by matching envelopes, without a model (RELAY_HOOKS).
# They run through the tool runner under role "hooks" (policy.yaml). More: docs/hooks.md.
# Try one with: relay hooks test NAME --envelope FILE
hooks: []
# An example: echo every new GitHub issue through the reference server.
# hooks:
#   - name: echo-new-issues
#     on: ["github.issues.opened"]
#     actions:
#       - type: mcp
#         parameters:
#           serverId: everything
#           toolName: echo
#           parameterMappings:
#             - {toolParam: message, source: template, value: "{{.actor}} opened {{.url}}"}
#           timeout: 30000
`
