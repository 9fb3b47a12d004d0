package approvals

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/relaystation/relay/bus"
	slackmapper "github.com/relaystation/relay/mappers/slack"
)

// approvers decides who may approve: listed users, and members of listed
// user groups (usergroups.users.list, cached for ttl). It is safe for
// concurrent use.
type approvers struct {
	users  map[string]bool
	groups []string
	api    SlackAPI
	ttl    time.Duration
	now    func() time.Time
	log    *slog.Logger

	mu    sync.Mutex
	cache map[string]groupMembers
}

type groupMembers struct {
	members map[string]bool
	at      time.Time
}

func newApprovers(ids []string, api SlackAPI, ttl time.Duration, now func() time.Time, log *slog.Logger) *approvers {
	a := &approvers{users: map[string]bool{}, api: api, ttl: ttl, now: now, log: log, cache: map[string]groupMembers{}}
	for _, id := range ids {
		if strings.HasPrefix(id, "S") {
			a.groups = append(a.groups, id)
		} else {
			a.users[id] = true
		}
	}
	return a
}

// allowed reports whether user may decide. An error means a group's
// membership could not be read and no earlier answer is cached; the caller
// retries later (fail closed meanwhile).
func (a *approvers) allowed(ctx context.Context, user string) (bool, error) {
	if user == "" {
		return false, nil
	}
	if a.users[user] {
		return true, nil
	}
	for _, g := range a.groups {
		m, err := a.members(ctx, g)
		if err != nil {
			return false, err
		}
		if m[user] {
			return true, nil
		}
	}
	return false, nil
}

func (a *approvers) members(ctx context.Context, group string) (map[string]bool, error) {
	a.mu.Lock()
	c, ok := a.cache[group]
	a.mu.Unlock()
	if ok && a.now().Sub(c.at) < a.ttl {
		return c.members, nil
	}
	ids, err := a.api.GetUserGroupMembersContext(ctx, group)
	if err != nil {
		err = slackmapper.Classify("usergroups.users.list", err)
		switch {
		case ok:
			a.log.Warn("user group membership not refreshed; using the cached list", "group", group, "err", err)
			return c.members, nil
		case bus.IsPermanent(err):
			// A group Slack does not know (or may not be read) has no members.
			a.log.Warn("user group cannot be read; treating it as empty", "group", group, "err", err)
			ids = nil
		default:
			return nil, fmt.Errorf("read members of user group %s: %w", group, err)
		}
	}
	m := make(map[string]bool, len(ids))
	for _, id := range ids {
		m[id] = true
	}
	a.mu.Lock()
	a.cache[group] = groupMembers{members: m, at: a.now()}
	a.mu.Unlock()
	return m, nil
}
