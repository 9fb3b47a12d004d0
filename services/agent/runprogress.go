package agent

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/slack-go/slack"

	"github.com/relaystation/relay/bus"
	slackmapper "github.com/relaystation/relay/mappers/slack"
)

// A code-block run whose tool runs as an MCP task shows the task's
// statuses in its running message (the tool runner publishes them on
// system.tool.progress, with the call's meta.agent.code_run). The updates
// and the result's replacement of the message are ordered through one key
// of the run bucket, "msg.<execution id>": "busy:<unix nanos>" while a
// status update is under way, "idle" after it, "done" once the result
// replaces the message; a status arriving after "done" is dropped, and the
// result waits for a status update under way.

// runMsgBusy is how long a status update may hold the running message
// before the result takes it anyway (the updating agent died).
const runMsgBusy = 10 * time.Second

func runMsgKey(st runState) string { return "msg." + runCallID(st) }

// handleRunProgress shows a task's status in its run's running message.
// Status updates are best effort: a failed one is logged, not retried.
func (s *Service) handleRunProgress(ctx context.Context, m *bus.Message) error {
	e := m.Envelope
	var a struct {
		Run *runState `json:"code_run"`
	}
	if ok, err := e.Meta.Decode("agent", &a); !ok || err != nil || a.Run == nil || a.Run.Target == nil {
		return nil // an agent task's call: no running message
	}
	st := *a.Run
	if st.MessageTS == "" || s.cfg.Slack == nil {
		return nil
	}
	var p struct {
		Message string `json:"message"`
	}
	if _, err := e.Meta.Decode("tool_progress", &p); err != nil || p.Message == "" {
		return nil
	}
	release, ok, err := s.holdRunMessage(ctx, st)
	if err != nil || !ok {
		return err
	}
	defer release()
	text, blocks := runningMessage(st, p.Message)
	if _, _, _, err := s.cfg.Slack.UpdateMessageContext(ctx, st.Target.SlackCh, st.MessageTS, slack.MsgOptionText(text, false), blocks); err != nil {
		s.log.Warn("running message not updated with the task's status", "origin", st.Origin, "err", slackmapper.Classify("chat.update", err))
	}
	return nil
}

// holdRunMessage takes the running message for a status update; ok is
// false when the result has replaced it or another update holds it.
func (s *Service) holdRunMessage(ctx context.Context, st runState) (release func(), ok bool, err error) {
	if s.runs == nil {
		return func() {}, true, nil
	}
	key := runMsgKey(st)
	busy := []byte("busy:" + strconv.FormatInt(time.Now().UnixNano(), 10))
	var rev uint64
	e, err := s.runs.Get(ctx, key)
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
		if rev, err = s.runs.Create(ctx, key, busy); err != nil {
			return nil, false, nil // the result or another update came first
		}
	case err != nil:
		return nil, false, err
	default:
		if v := string(e.Value()); v == "done" || (strings.HasPrefix(v, "busy:") && !stale(v)) {
			return nil, false, nil
		}
		if rev, err = s.runs.Update(ctx, key, busy, e.Revision()); err != nil {
			return nil, false, nil
		}
	}
	return func() {
		if _, err := s.runs.Update(context.WithoutCancel(ctx), key, []byte("idle"), rev); err != nil {
			s.log.Debug("running message not released; the result takes it after a while", "origin", st.Origin, "err", err)
		}
	}, true, nil
}

// stale reports whether a "busy:<nanos>" value is older than runMsgBusy.
func stale(v string) bool {
	n, err := strconv.ParseInt(strings.TrimPrefix(v, "busy:"), 10, 64)
	return err != nil || time.Since(time.Unix(0, n)) > runMsgBusy
}

// errRunMsgBusy: a status update of the running message is under way.
var errRunMsgBusy = errors.New("a status update of the run's running message is under way")

// runMessageDone marks the running message as replaced by the result, so
// no later status update overwrites it; while a status update holds it,
// the result's delivery is retried shortly.
func (s *Service) runMessageDone(ctx context.Context, st runState) error {
	if s.runs == nil {
		return nil
	}
	key := runMsgKey(st)
	var err error
	for range 5 {
		var e jetstream.KeyValueEntry
		e, err = s.runs.Get(ctx, key)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			if _, err = s.runs.Create(ctx, key, []byte("done")); err == nil {
				return nil
			}
			continue
		}
		if err != nil {
			return err
		}
		v := string(e.Value())
		if v == "done" {
			return nil
		}
		if strings.HasPrefix(v, "busy:") && !stale(v) {
			return bus.RetryAfter(errRunMsgBusy, 200*time.Millisecond)
		}
		if _, err = s.runs.Update(ctx, key, []byte("done"), e.Revision()); err == nil {
			return nil
		}
	}
	return fmt.Errorf("mark the running message of run %s replaced: %w", st.Origin, err)
}
