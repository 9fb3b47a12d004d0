package console

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/relaystation/relay/bus"
	"github.com/relaystation/relay/internal/rpc/approvalrpc"
	"github.com/relaystation/relay/tools"
)

// rpcTimeout bounds the console's requests to the workers.
const rpcTimeout = 3 * time.Second

func (s *Service) rpcContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, rpcTimeout)
}

// rate is one provider's inbound rate.
type rate struct {
	Provider   string
	LastMinute int
	PerSecond  string
}

func (s *Service) overviewData(ctx context.Context, _ url.Values) (map[string]any, error) {
	d := map[string]any{}
	counts := s.hub.rates(time.Minute)
	var rates []rate
	for _, p := range []string{"github", "slack", "sentry", "openproject"} {
		rates = append(rates, rate{Provider: p, LastMinute: counts[p], PerSecond: strconv.FormatFloat(float64(counts[p])/60, 'f', 2, 64)})
	}
	d["Rates"] = rates
	cctx, ccancel := s.rpcContext(ctx)
	perProvider, first, err := s.providers.counts(cctx, &s.inbound, s.bus.Conn(), s.bus.JetStream(), s.bus.StreamName("in.x"), s.bus.Subject, s.cfg.Now(), chartMinutes)
	ccancel()
	if err == nil {
		d["WebhookChart"] = stackedChart("Webhooks per minute", "no webhooks in the last hour", perProvider, first)
	}
	d["ChartError"] = errText(err)
	cctx, ccancel = s.rpcContext(ctx)
	dlPerMinute, first, err := s.deadLetters.counts(cctx, s.bus.Conn(), s.bus.JetStream(), s.bus.StreamName("dlq.x"), s.cfg.Now(), chartMinutes)
	ccancel()
	if err == nil {
		d["DeadLetterChart"] = barChart("Dead letters per minute", dlPerMinute, first)
	}
	d["DeadLetterChartError"] = errText(err)
	cctx, ccancel = s.rpcContext(ctx)
	lat, err := s.latency.view(cctx, s.bus, s.cfg.Now())
	ccancel()
	d["LatencyChart"], d["LatencyChartError"] = latencyChart(lat), errText(err)
	cctx, ccancel = s.rpcContext(ctx)
	calls, failed, first, err := s.toolCalls.counts(cctx, s.bus, s.cfg.Now(), chartMinutes)
	ccancel()
	d["ToolCallsChart"] = stackedChart("Tool calls per minute", "no tool call in the last hour", calls, first)
	d["ToolErrorsChart"] = stackedChart("Failed tool calls per minute", "no failed tool call in the last hour", failed, first)
	d["ToolChartError"] = errText(err)
	dls, err := s.bus.DeadLetters(ctx, 0)
	d["DeadLetters"], d["DLQError"] = len(dls), errText(err)
	errs := 0
	for _, dl := range dls {
		if time.Since(dl.Time) < time.Hour {
			errs++
		}
	}
	d["RecentErrors"] = errs
	rctx, cancel := s.rpcContext(ctx)
	defer cancel()
	waiting, pending, err := approvalrpc.ListTotal(rctx, s.bus.Conn(), s.bus.Prefix(), approvalrpc.ListRequest{Preview: approvalrpc.PreviewBytes})
	d["Pending"], d["PendingError"] = pending, errText(err)
	if err == nil {
		ages := make([]time.Duration, len(waiting))
		for i, it := range waiting {
			ages[i] = max(s.cfg.Now().Sub(it.CreatedAt), 0)
		}
		d["ApprovalsChart"] = ageChart(ages, max(pending-len(waiting), 0))
	}
	st, err := tools.StatusRemote(rctx, s.bus.Conn(), s.bus.Prefix())
	d["Tools"], d["ToolsError"] = st, errText(err)
	d["Seen"] = s.hub.count()
	return d, nil
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// eventFilter is the Events page's filter.
type eventFilter struct{ Channel, Subject, Thread, Actor string }

func (f eventFilter) keep(e *Event) bool {
	return (f.Channel == "" || string(e.h.Channel) == f.Channel) &&
		(f.Subject == "" || strings.Contains(e.Subject, f.Subject)) &&
		(f.Thread == "" || strings.Contains(e.h.Thread, f.Thread)) &&
		(f.Actor == "" || strings.Contains(e.Actor(), f.Actor))
}

func (s *Service) eventsData(_ context.Context, q url.Values) (map[string]any, error) {
	f := eventFilter{Channel: q.Get("channel"), Subject: q.Get("subject"), Thread: q.Get("thread"), Actor: q.Get("actor")}
	return map[string]any{"Filter": f, "Events": s.hub.filter(200, f.keep)}, nil
}

func (s *Service) storyData(ctx context.Context, q url.Values) (map[string]any, error) {
	id := strings.TrimSpace(q.Get("id"))
	d := map[string]any{"ID": id}
	if id == "" {
		return d, nil
	}
	st, err := s.story.Story(ctx, id)
	d["Story"], d["Error"] = st, errText(err)
	return d, nil
}

func (s *Service) approvalsData(ctx context.Context, q url.Values) (map[string]any, error) {
	rctx, cancel := s.rpcContext(ctx)
	defer cancel()
	pending, total, err := approvalrpc.ListTotal(rctx, s.bus.Conn(), s.bus.Prefix(), approvalrpc.ListRequest{Preview: approvalrpc.PreviewBytes})
	edit := q.Get("edit")
	if i := slices.IndexFunc(pending, func(it approvalrpc.Item) bool { return it.TaskID == edit && it.Cut }); i >= 0 {
		// The one being read or edited, whole.
		whole, gerr := approvalrpc.Get(rctx, s.bus.Conn(), s.bus.Prefix(), approvalrpc.GetRequest{TaskID: edit})
		if gerr != nil {
			err = fmt.Errorf("the whole text of task %s: %w", edit, gerr)
		} else if whole.Round == pending[i].Round {
			pending[i] = *whole
		}
	}
	// All as well as Decided: a worker before Decided answers as for All.
	recent, _ := approvalrpc.List(rctx, s.bus.Conn(), s.bus.Prefix(), approvalrpc.ListRequest{All: true, Decided: true, Limit: 20, Preview: approvalrpc.PreviewBytes})
	var decided []approvalrpc.Item
	for _, it := range recent {
		if it.Status != "pending" {
			decided = append(decided, it)
		}
	}
	return map[string]any{"Pending": pending, "PendingTotal": total, "Decided": decided, "Error": errText(err), "Edit": edit}, nil
}

func (s *Service) dlqData(ctx context.Context, _ url.Values) (map[string]any, error) {
	dls, err := s.bus.DeadLetters(ctx, 0)
	slices.Reverse(dls)
	return map[string]any{"Letters": dls[:min(len(dls), 200)], "Total": len(dls), "Error": errText(err)}, nil
}

func (s *Service) toolsData(ctx context.Context, q url.Values) (map[string]any, error) {
	rctx, cancel := s.rpcContext(ctx)
	defer cancel()
	st, err := tools.StatusRemote(rctx, s.bus.Conn(), s.bus.Prefix())
	var active []tools.Execution
	var activeErr error
	if err == nil {
		active, activeErr = tools.ActiveRemote(rctx, s.bus.Conn(), s.bus.Prefix())
	}
	audit := strings.TrimSpace(q.Get("audit"))
	return map[string]any{
		"Status": st, "Error": errText(err), "CanSwitch": s.cfg.Tools != nil,
		"Active": active, "ActiveError": errText(activeErr), "Now": s.cfg.Now(),
		"Hooks": s.hub.filter(50, func(e *Event) bool { return e.Subject == "hook.executed" }),
		"Audit": s.hub.filter(100, func(e *Event) bool {
			return strings.HasPrefix(e.Subject, "audit.") && (audit == "" || bytes.Contains(bytes.ToLower(e.Raw), []byte(strings.ToLower(audit))))
		}),
		"AuditQuery": audit, "Conns": s.connections(rctx, st),
	}, nil
}

// eventJSON shows one envelope's JSON.
func (s *Service) eventJSON(w http.ResponseWriter, r *http.Request, sess *session) {
	if err := s.hub.follow(r.Context()); err != nil {
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	}
	e := s.hub.byID(r.PathValue("id"))
	if e == nil {
		http.Error(w, "no such envelope among the recent ones", http.StatusNotFound)
		return
	}
	s.render(w, r, "json", sess, map[string]any{"Title": "Envelope " + e.h.ID, "Subject": e.Subject, "JSON": prettyJSON(e.Raw),
		"Thread": e.h.Thread, "Task": e.h.TaskID})
}

// dlqShow shows one dead letter.
func (s *Service) dlqShow(w http.ResponseWriter, r *http.Request, sess *session) {
	seq, err := strconv.ParseUint(r.PathValue("seq"), 10, 64)
	if err != nil {
		http.Error(w, "bad dead letter sequence", http.StatusBadRequest)
		return
	}
	dl, err := s.bus.DeadLetter(r.Context(), seq)
	if err != nil {
		http.Error(w, fmt.Sprintf("dead letter %d: %v", seq, err), http.StatusNotFound)
		return
	}
	raw, _ := json.Marshal(dl)
	s.render(w, r, "json", sess, map[string]any{"Title": fmt.Sprintf("Dead letter %d", seq), "Subject": dl.Subject,
		"JSON": prettyJSON(raw), "Seq": seq, "Reason": dl.Reason})
}

func prettyJSON(raw json.RawMessage) string {
	var buf bytes.Buffer
	if err := json.Indent(&buf, raw, "", "  "); err != nil {
		return string(raw)
	}
	return buf.String()
}

// deleteDeadLetter removes dead letter seq from the dead-letter stream.
func deleteDeadLetter(ctx context.Context, b *bus.Bus, seq uint64) error {
	st, err := b.JetStream().Stream(ctx, b.StreamName("dlq.x"))
	if err != nil {
		return fmt.Errorf("dead-letter stream: %w", err)
	}
	if err := st.DeleteMsg(ctx, seq); err != nil {
		return fmt.Errorf("delete dead letter %d: %w", seq, err)
	}
	return nil
}
