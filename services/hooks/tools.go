package hooks

import (
	"context"
	"time"

	"github.com/relaystation/relay/envelope"
	"github.com/relaystation/relay/tools"
)

// CatalogFrom asks the running tool runner (through the service's bus) for
// its servers and the tools each role of f may call. A runner that does not
// answer leaves Tools nil (every tool check is then a warning).
func (s *Service) CatalogFrom(ctx context.Context, f *File) Catalog {
	var cat Catalog
	sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	st, err := tools.StatusRemote(sctx, s.bus.Conn(), s.bus.Prefix())
	if err != nil {
		return cat
	}
	cat.Servers = []string{}
	cat.Reachable = map[string]bool{}
	for _, sv := range st.Servers {
		cat.Servers = append(cat.Servers, sv.Name)
		if sv.State == tools.StateReady || sv.State == tools.StateDegraded {
			cat.Reachable[sv.Name] = true
		}
	}
	cat.Tools = map[string]map[string]tools.ToolInfo{}
	for _, h := range f.Hooks {
		if _, done := cat.Tools[h.Role]; done {
			continue
		}
		list, err := tools.ListRemote(sctx, s.bus.Conn(), s.bus.Prefix(), h.Role)
		if err != nil {
			return Catalog{Servers: cat.Servers}
		}
		m := make(map[string]tools.ToolInfo, len(list))
		for _, t := range list {
			m[t.Name] = t
		}
		cat.Tools[h.Role] = m
	}
	return cat
}

// Trial is what `relay hooks test` shows for one action.
type Trial struct {
	Action int            `json:"action"`
	Tool   string         `json:"tool"`
	Params map[string]any `json:"params,omitempty"`
	// Problem is why the parameters did not resolve or break the tool's
	// inputSchema; empty when they are valid.
	Problem string `json:"problem,omitempty"`
	// Execution is set when the action was run.
	Execution *Execution `json:"execution,omitempty"`
}

// Try resolves h's actions for e and checks the arguments against the
// tools' inputSchemas; with run it also calls each tool through the runner
// (no claim: a test run is not an envelope's execution and is not recorded).
// matched says whether h fires for e.
func (s *Service) Try(ctx context.Context, h *Hook, e *envelope.Envelope, run bool) (matched bool, trials []Trial, err error) {
	c := NewContext(e)
	matched = h.Matches(e, c)
	if run {
		if err := s.caller.start(); err != nil {
			return matched, nil, err
		}
		defer s.caller.stop()
	}
	for i, a := range h.Actions {
		tr := Trial{Action: i + 1, Tool: a.Parameters.Tool()}
		info, ierr := s.toolInfo(ctx, h.Role, a.Parameters.Tool())
		args, rerr := a.Resolve(c, info.InputSchema)
		if red, _ := s.cfg.Redactor.Value(map[string]any(args)); red != nil {
			tr.Params, _ = red.(map[string]any)
		}
		switch {
		case rerr != nil:
			tr.Problem = rerr.Error()
		case ierr != nil:
			tr.Problem = "not checked against the inputSchema: " + ierr.Error()
		default:
			if sch, err := s.inputSchema(info); err != nil {
				tr.Problem = err.Error()
			} else if err := checkArgs(sch, args); err != nil {
				tr.Problem = "arguments break the inputSchema: " + err.Error()
			}
		}
		if run {
			x := s.Execute(ctx, h, i, e, c, "test-"+RunKey(h.Name, i+1, e.ID)+"-"+time.Now().UTC().Format("150405.000000"))
			tr.Execution = &x
		}
		trials = append(trials, tr)
	}
	return matched, trials, nil
}
