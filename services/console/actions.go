package console

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/relaystation/relay/internal/rpc/approvalrpc"
	"github.com/relaystation/relay/tools"
)

// action is a state-changing request: it returns what to tell the operator
// on the page it sends them back to.
type action func(ctx context.Context, r *http.Request, sess *session) (notice string, err error)

func (s *Service) actionRoutes(mux *http.ServeMux) {
	for path, a := range map[string]action{
		"/approvals/{task}/{verb}": s.decide,
		"/dlq/{seq}/replay":        s.replayOne,
		"/dlq/{seq}/delete":        s.deleteOne,
		"/dlq/replay-all":          s.replayAll,
		"/tools/{server}/{verb}":   s.switchServer,
		"/tools/stop-switch":       s.stopSwitch,
		"/executions/{id}/cancel":  s.cancelExecution,
	} {
		mux.HandleFunc("POST "+path, s.guard(s.act(a)))
	}
}

// act runs an action and sends the browser back to the page it came from
// (the form's "back" field, a console path) with the notice.
func (s *Service) act(a action) func(http.ResponseWriter, *http.Request, *session) {
	return func(w http.ResponseWriter, r *http.Request, sess *session) {
		// A browser that navigates away must not cut an action short.
		ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), 30*time.Second)
		defer cancel()
		notice, err := a(ctx, r, sess)
		status := http.StatusSeeOther
		if err != nil {
			notice, status = "Failed: "+err.Error(), http.StatusSeeOther
			s.log.Warn("console action failed", "path", r.URL.Path, "operator", sess.who(), "err", err)
		} else {
			s.log.Info("console action", "path", r.URL.Path, "operator", sess.who(), "notice", notice)
		}
		back := consolePath(r.PostFormValue("back"))
		u, _ := url.Parse(back)
		q := u.Query()
		q.Set("notice", notice)
		u.RawQuery = q.Encode()
		http.Redirect(w, r, u.String(), status)
	}
}

func (s *Service) decide(ctx context.Context, r *http.Request, sess *session) (string, error) {
	req := approvalrpc.DecideRequest{TaskID: r.PathValue("task"), By: sess.who(),
		Text: r.PostFormValue("text"), Reason: r.PostFormValue("reason")}
	req.Round, _ = strconv.Atoi(r.PostFormValue("round"))
	switch verb := r.PathValue("verb"); verb {
	case "approve", "edit", "reject":
		req.Action = verb
	default:
		return "", fmt.Errorf("unknown decision %q", verb)
	}
	resp, err := approvalrpc.Decide(ctx, s.bus.Conn(), s.bus.Prefix(), req)
	if err != nil {
		return "", err
	}
	if !resp.Won {
		return fmt.Sprintf("Task %s was already %s by %s; nothing changed.", req.TaskID, resp.Item.Status, resp.Item.DecidedBy), nil
	}
	return fmt.Sprintf("Task %s: %s by %s.", req.TaskID, resp.Item.Status, sess.who()), nil
}

func seqOf(r *http.Request) (uint64, error) {
	seq, err := strconv.ParseUint(r.PathValue("seq"), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("bad dead letter sequence %q", r.PathValue("seq"))
	}
	return seq, nil
}

func (s *Service) replayOne(ctx context.Context, r *http.Request, _ *session) (string, error) {
	seq, err := seqOf(r)
	if err != nil {
		return "", err
	}
	if _, err := s.bus.Replay(ctx, seq); err != nil {
		return "", fmt.Errorf("replay dead letter %d: %w", seq, err)
	}
	return fmt.Sprintf("Dead letter %d replayed.", seq), nil
}

func (s *Service) deleteOne(ctx context.Context, r *http.Request, _ *session) (string, error) {
	seq, err := seqOf(r)
	if err != nil {
		return "", err
	}
	if err := deleteDeadLetter(ctx, s.bus, seq); err != nil {
		return "", err
	}
	return fmt.Sprintf("Dead letter %d deleted.", seq), nil
}

func (s *Service) replayAll(ctx context.Context, _ *http.Request, _ *session) (string, error) {
	dls, err := s.bus.DeadLetters(ctx, 0)
	if err != nil {
		return "", err
	}
	for i, dl := range dls {
		if _, err := s.bus.Replay(ctx, dl.Seq); err != nil {
			return "", fmt.Errorf("replayed %d of %d; dead letter %d: %w", i, len(dls), dl.Seq, err)
		}
	}
	return fmt.Sprintf("%d dead letter(s) replayed.", len(dls)), nil
}

func (s *Service) switchServer(ctx context.Context, r *http.Request, sess *session) (string, error) {
	if s.cfg.Tools == nil {
		return "", fmt.Errorf("the tool runners' state is not available to this console")
	}
	name, verb := r.PathValue("server"), r.PathValue("verb")
	if verb != "enable" && verb != "disable" {
		return "", fmt.Errorf("unknown switch %q", verb)
	}
	st := tools.ServerState{Disabled: verb == "disable", By: "operator", At: time.Now().UTC()}
	if st.Disabled {
		st.Reason = "disabled in the console by " + sess.who()
	}
	if err := s.cfg.Tools.SetServer(ctx, name, st); err != nil {
		return "", err
	}
	return fmt.Sprintf("%sd %s (running tool runners pick it up at once).", verb, name), nil
}

func (s *Service) stopSwitch(ctx context.Context, r *http.Request, _ *session) (string, error) {
	if s.cfg.Tools == nil {
		return "", fmt.Errorf("the tool runners' state is not available to this console")
	}
	stop := r.PostFormValue("stop") == "on"
	if err := s.cfg.Tools.SetStop(ctx, stop); err != nil {
		return "", err
	}
	if stop {
		return "Stop switch ON: tool runners refuse new executions.", nil
	}
	return "Stop switch off: tool executions resume.", nil
}

// cancelExecution cancels a running tool execution through the runner that
// owns it, as the signed-in operator (the audit record names them).
func (s *Service) cancelExecution(ctx context.Context, r *http.Request, sess *session) (string, error) {
	id := r.PathValue("id")
	if err := tools.CancelRemote(ctx, s.bus.Conn(), s.bus.Prefix(), id, "console:"+sess.who()); err != nil {
		return "", fmt.Errorf("cancel execution %s: %w", id, err)
	}
	return "Cancelled execution " + id + ".", nil
}

func urlQueryEscape(s string) string { return url.QueryEscape(s) }
