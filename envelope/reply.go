package envelope

import (
	"fmt"
	"strconv"
	"strings"
)

// TargetOf returns where the answer to the inbound envelope e goes (the
// agent's answers and the hooks' replies alike): the
// GitHub issue or pull request of its thread, the Slack thread (or, for a
// slash command, the channel), the Sentry issue, or the OpenProject work
// package. It reads meta.thread and the provider's meta extra (meta.slack,
// meta.sentry, meta.openproject) that the mappers fill.
func TargetOf(e *Envelope) (*Target, error) {
	thread := e.Meta.Thread
	_, rest, _ := strings.Cut(thread, ":")
	var t *Target
	switch e.Channel {
	case ChannelGitHub:
		owner, repo, num, ok := parseGitHubThread(rest)
		if !ok {
			return nil, fmt.Errorf("github thread %q names no issue or pull request", thread)
		}
		t = &Target{Channel: string(ChannelGitHub), Owner: owner, Repo: repo, Number: num}
	case ChannelSlack:
		s := metaExtra(e, "slack")
		t = &Target{Channel: string(ChannelSlack), Team: metaString(s, "team"), SlackCh: metaString(s, "channel")}
		t.ThreadTS = metaString(s, "thread_ts")
		if t.ThreadTS == "" {
			t.ThreadTS = metaString(s, "ts")
		}
		if t.SlackCh == "" {
			// slack:{team}/{channel}/{thread_ts}
			parts := strings.SplitN(rest, "/", 3)
			if len(parts) == 3 {
				t.Team, t.SlackCh = parts[0], parts[1]
				if !strings.HasPrefix(parts[2], "cmd-") {
					t.ThreadTS = parts[2]
				}
			}
		}
	case ChannelSentry:
		s := metaExtra(e, "sentry")
		t = &Target{Channel: string(ChannelSentry), Org: metaString(s, "org"), IssueID: metaString(s, "issue_id")}
		if org, id, ok := strings.Cut(rest, "/"); ok {
			if t.Org == "" {
				t.Org = org
			}
			if t.IssueID == "" && !strings.HasPrefix(id, "incident-") {
				t.IssueID = id
			}
		}
	case ChannelOpenProject:
		// openproject:{host}/work_packages/{id}
		host, idStr, ok := strings.Cut(rest, "/work_packages/")
		id, err := strconv.Atoi(idStr)
		if !ok || err != nil {
			return nil, fmt.Errorf("openproject thread %q names no work package", thread)
		}
		t = &Target{Channel: string(ChannelOpenProject), Host: host, WorkPackageID: id}
	default:
		return nil, fmt.Errorf("no answer target for channel %q", e.Channel)
	}
	if err := t.Validate(); err != nil {
		return nil, err
	}
	return t, nil
}

// parseGitHubThread reads "{owner}/{repo}#{number}".
func parseGitHubThread(s string) (owner, repo string, num int, ok bool) {
	path, n, found := strings.Cut(s, "#")
	if !found {
		return "", "", 0, false
	}
	owner, repo, found = strings.Cut(path, "/")
	num, err := strconv.Atoi(n)
	if !found || err != nil || owner == "" || repo == "" || num <= 0 {
		return "", "", 0, false
	}
	return owner, repo, num, true
}

func metaExtra(e *Envelope, key string) map[string]any {
	m, _ := e.Meta.Extra[key].(map[string]any)
	return m
}

func metaString(m map[string]any, key string) string {
	switch v := m[key].(type) {
	case string:
		return v
	case float64:
		return strconv.FormatFloat(v, 'f', -1, 64)
	}
	return ""
}
