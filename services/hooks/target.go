package hooks

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/relaystation/relay/envelope"
)

// targetOf is where an answer to e goes: its GitHub issue or pull request,
// Slack thread, Sentry issue or OpenProject work package, from meta.thread and
// the provider's meta extra. (The agent has the same rule; services do not
// import each other.)
func targetOf(e *envelope.Envelope) (*envelope.Target, error) {
	_, rest, _ := strings.Cut(e.Meta.Thread, ":")
	var t *envelope.Target
	switch e.Channel {
	case envelope.ChannelGitHub:
		path, n, _ := strings.Cut(rest, "#")
		owner, repo, _ := strings.Cut(path, "/")
		num, err := strconv.Atoi(n)
		if err != nil || owner == "" || repo == "" || num <= 0 {
			return nil, fmt.Errorf("github thread %q names no issue or pull request", e.Meta.Thread)
		}
		t = &envelope.Target{Channel: string(envelope.ChannelGitHub), Owner: owner, Repo: repo, Number: num}
	case envelope.ChannelSlack:
		parts := strings.SplitN(rest, "/", 3)
		if len(parts) != 3 {
			return nil, fmt.Errorf("slack thread %q names no conversation", e.Meta.Thread)
		}
		t = &envelope.Target{Channel: string(envelope.ChannelSlack), Team: parts[0], SlackCh: parts[1]}
		if !strings.HasPrefix(parts[2], "cmd-") {
			t.ThreadTS = parts[2]
		}
	case envelope.ChannelSentry:
		org, id, _ := strings.Cut(rest, "/")
		t = &envelope.Target{Channel: string(envelope.ChannelSentry), Org: org, IssueID: id}
	case envelope.ChannelOpenProject:
		host, idStr, _ := strings.Cut(rest, "/work_packages/")
		id, err := strconv.Atoi(idStr)
		if err != nil {
			return nil, fmt.Errorf("openproject thread %q names no work package", e.Meta.Thread)
		}
		t = &envelope.Target{Channel: string(envelope.ChannelOpenProject), Host: host, WorkPackageID: id}
	default:
		return nil, fmt.Errorf("no thread to answer on channel %q", e.Channel)
	}
	if err := t.Validate(); err != nil {
		return nil, err
	}
	return t, nil
}
