package envelope

import (
	"crypto/sha256"
	"fmt"
	"strconv"
	"strings"

	"github.com/google/uuid"
)

// Thread keys are stable per conversation: every envelope about one issue, pull
// request, Slack thread, Sentry issue or work package carries the same key in
// meta.thread.

// GitHubThread is "github:{owner}/{repo}#{number}".
func GitHubThread(owner, repo string, number int) string {
	var n [20]byte // the number's digits, copied once by the concatenation
	return "github:" + owner + "/" + repo + "#" + string(strconv.AppendInt(n[:0], int64(number), 10))
}

// SlackThread is "slack:{team}/{channel}/{thread_ts}".
func SlackThread(team, channel, threadTS string) string {
	return "slack:" + team + "/" + channel + "/" + threadTS
}

// SentryThread is "sentry:{org}/{issue_id}".
func SentryThread(org, issueID string) string {
	return "sentry:" + org + "/" + issueID
}

// OpenProjectThread is "openproject:{host}/work_packages/{id}".
func OpenProjectThread(host string, id int) string {
	return fmt.Sprintf("openproject:%s/work_packages/%d", host, id)
}

// ThreadChannel returns the channel a thread key belongs to, or "" when the key
// has no known prefix.
func ThreadChannel(thread string) Channel {
	prefix, _, ok := strings.Cut(thread, ":")
	if !ok {
		return ""
	}
	switch c := Channel(prefix); c {
	case ChannelSlack, ChannelGitHub, ChannelSentry, ChannelOpenProject, ChannelInternal:
		return c
	}
	return ""
}

// ThreadSource is the source a thread key belongs to, the unit the relay's
// per-source limits count: "repository" for GitHub (github:{owner}/{repo}),
// Sentry (sentry:{org}) and OpenProject (openproject:{host}), "channel" for
// Slack (slack:{team}/{channel}). It returns "", "" for a key of no source.
func ThreadSource(thread string) (kind, source string) {
	switch ThreadChannel(thread) {
	case ChannelSlack:
		// slack:{team}/{channel}/{thread_ts}
		if parts := strings.SplitN(strings.TrimPrefix(thread, "slack:"), "/", 3); len(parts) >= 2 {
			return "channel", "slack:" + parts[0] + "/" + parts[1]
		}
	case ChannelGitHub:
		// github:{owner}/{repo}#{number}
		if repo, _, ok := strings.Cut(thread, "#"); ok {
			return "repository", repo
		}
	case ChannelSentry, ChannelOpenProject:
		// sentry:{org}/{issue}, openproject:{host}/work_packages/{id}
		if org, _, ok := strings.Cut(thread, "/"); ok {
			return "repository", org
		}
	}
	return "", ""
}

// DerivedID is a UUID in version 4 form (as the schema wants an envelope id)
// derived from name: an envelope published again under the same name keeps
// its id, so consumers that claim ids see it once.
func DerivedID(name string) string {
	return uuid.NewHash(sha256.New(), uuid.NameSpaceOID, []byte(name), 4).String()
}

// TaskOf is the task id the agent gives the task an inbound envelope starts:
// a UUID v5 of the envelope id, so a redelivered trigger maps to the same
// task and a reader (relay trace) can find the task of a webhook.
func TaskOf(envelopeID string) string {
	return uuid.NewSHA1(uuid.NameSpaceOID, []byte("relay-task:"+envelopeID)).String()
}
