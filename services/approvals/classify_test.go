package approvals

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/slack-go/slack"

	"github.com/relaystation/relay/bus"
)

// groupAPI answers usergroups.users.list with err.
type groupAPI struct {
	SlackAPI
	err error
}

func (g groupAPI) GetUserGroupMembersContext(context.Context, string, ...slack.GetUserGroupMembersOption) ([]string, error) {
	return nil, g.err
}

// TestSlackFailuresClassified: Slack's failures reach the bus classified by
// mappers/slack, as outbound's do: a rate limit retries after Slack's delay,
// an error Slack will repeat is permanent (an unreadable group has no
// members), the rest is transient.
func TestSlackFailuresClassified(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name    string
		err     error
		wantErr bool
		delay   time.Duration
	}{
		{"rate limited", &slack.RateLimitedError{RetryAfter: 3 * time.Second}, true, 3 * time.Second},
		{"internal error", slack.SlackErrorResponse{Err: "internal_error"}, true, 0},
		{"unknown group", slack.SlackErrorResponse{Err: "no_such_subteam"}, false, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			a := newApprovers([]string{"S0GROUP"}, groupAPI{err: tc.err}, time.Minute, time.Now, slog.New(slog.DiscardHandler))
			m, err := a.members(t.Context(), "S0GROUP")
			if (err != nil) != tc.wantErr {
				t.Fatalf("got members %v, error %v; want an error: %v", m, err, tc.wantErr)
			}
			if err == nil {
				if len(m) != 0 {
					t.Fatalf("got members %v, want none", m)
				}
				return
			}
			if bus.IsPermanent(err) || bus.RetryDelay(err) != tc.delay {
				t.Fatalf("got permanent %v, delay %s; want transient, %s (%v)", bus.IsPermanent(err), bus.RetryDelay(err), tc.delay, err)
			}
		})
	}
}
