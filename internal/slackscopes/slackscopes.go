// Package slackscopes is the one list of the Slack bot scopes the relay
// needs: `relay doctor` compares a token's granted scopes (auth.test's
// X-OAuth-Scopes header) with it, and the Slack app manifest
// (deploy/slack-app.yaml, `relay setup slack`) grants it.
package slackscopes

import (
	"slices"
	"strings"
)

// Methods are the Slack Web API methods the relay calls with its bot token,
// with the scope each needs ("" for none: views.open is allowed by the
// trigger of an interaction).
var Methods = map[string]string{
	"auth.test":                    "",
	"chat.postMessage":             "chat:write",
	"chat.update":                  "chat:write",
	"chat.postEphemeral":           "chat:write",
	"views.open":                   "",
	"conversations.history":        "channels:history",
	"conversations.replies":        "channels:history",
	"conversations.info":           "channels:read",
	"usergroups.users.list":        "usergroups:read",
	"files.getUploadURLExternal":   "files:write",
	"files.completeUploadExternal": "files:write",
}

// Bot are the bot token scopes the relay needs, sorted: those of Methods,
// those of the events it subscribes to (app_mentions:read, reactions:read,
// the history of private channels) and of the /relay command (commands).
var Bot = []string{
	"app_mentions:read",
	"channels:history",
	"channels:read",
	"chat:write",
	"commands",
	"files:write",
	"groups:history",
	"groups:read",
	"reactions:read",
	"usergroups:read",
}

// Missing returns the scopes of Bot that granted (the X-OAuth-Scopes
// header: "chat:write,commands,...") lacks.
func Missing(granted string) []string {
	have := map[string]bool{}
	for _, s := range strings.Split(granted, ",") {
		have[strings.TrimSpace(s)] = true
	}
	var out []string
	for _, s := range Bot {
		if !have[s] {
			out = append(out, s)
		}
	}
	return out
}

// Granted reports whether every scope of Methods is in Bot.
func Granted() bool {
	for _, s := range Methods {
		if s != "" && !slices.Contains(Bot, s) {
			return false
		}
	}
	return true
}
