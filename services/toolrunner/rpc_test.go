package toolrunner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/nats-io/nats.go"

	"github.com/relaystation/relay/bus/bustest"
	"github.com/relaystation/relay/internal/rpc"
	"github.com/relaystation/relay/internal/testenv"
	"github.com/relaystation/relay/tools"
	"github.com/relaystation/relay/tools/mcpconfig"
	"github.com/relaystation/relay/tools/toolstest"
)

// The request/reply code of tool runners before nats.go/micro, kept here to
// test a rolling restart both ways: oldRequest is how their clients
// (`relay mcp list`, the agent) decoded a reply; oldServe is how they
// answered.

type oldListResponse struct {
	Tools []tools.ToolInfo `json:"tools"`
	Error string           `json:"error,omitempty"`
}

type oldStatusResponse struct {
	Servers []tools.ServerStatus `json:"servers"`
	Stopped bool                 `json:"stopped"`
}

func oldRequest(ctx context.Context, nc *nats.Conn, subj string, data []byte, out any) error {
	msg, err := nc.RequestWithContext(ctx, subj, data)
	if err != nil {
		return err
	}
	return json.Unmarshal(msg.Data, out)
}

// oldServe answers like a runner before micro: role "broken" gets the error
// body such a runner sent for a request it could not decode.
func oldServe(t *testing.T, nc *nats.Conn, prefix string, answered *atomic.Int32) {
	t.Helper()
	list, err := nc.QueueSubscribe(prefix+"."+tools.SubjectList, "toolrunner", func(m *nats.Msg) {
		answered.Add(1)
		var req struct{ Role string }
		resp := oldListResponse{Tools: []tools.ToolInfo{}}
		if err := json.Unmarshal(m.Data, &req); err != nil || req.Role == "broken" {
			resp.Error = "bad request: unexpected end of JSON input"
		} else {
			resp.Tools = []tools.ToolInfo{{Name: "old.echo", Server: "old", Tool: "echo", InputSchema: map[string]any{"type": "object"}}}
		}
		b, _ := json.Marshal(resp)
		_ = m.Respond(b)
	})
	if err != nil {
		t.Fatal(err)
	}
	status, err := nc.QueueSubscribe(prefix+"."+tools.SubjectStatus, "toolrunner", func(m *nats.Msg) {
		answered.Add(1)
		b, _ := json.Marshal(oldStatusResponse{Servers: []tools.ServerStatus{{Name: "old", State: tools.StateReady}}})
		_ = m.Respond(b)
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = list.Unsubscribe(); _ = status.Unsubscribe() })
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
}

// TestOldClientNewRunner: a client from before micro reads the runner's
// replies, errors included, as it always did.
func TestOldClientNewRunner(t *testing.T) {
	t.Parallel()
	f := start(t)
	nc := bustest.Connect(t, f.b).Conn()
	ctx := t.Context()
	var list oldListResponse
	if err := oldRequest(ctx, nc, f.b.Subject(tools.SubjectList), []byte(`{"role":"reader"}`), &list); err != nil {
		t.Fatal(err)
	}
	if list.Error != "" || len(list.Tools) != 1 || list.Tools[0].Name != "svc.echo" {
		t.Errorf("list: got %+v, want svc.echo", list)
	}
	var st oldStatusResponse
	if err := oldRequest(ctx, nc, f.b.Subject(tools.SubjectStatus), []byte(`{}`), &st); err != nil {
		t.Fatal(err)
	}
	if len(st.Servers) != 1 || st.Servers[0].Name != "svc" || st.Servers[0].State != tools.StateReady {
		t.Errorf("status: got %+v", st)
	}
	var bad oldListResponse
	if err := oldRequest(ctx, nc, f.b.Subject(tools.SubjectList), []byte(`not json`), &bad); err != nil {
		t.Fatal(err)
	}
	if bad.Tools == nil || len(bad.Tools) != 0 || bad.Error == "" {
		t.Errorf("bad request: got %+v, want no tools and the error in the body", bad)
	}
	// A new client gets the same error from micro's headers.
	msg, err := nc.RequestWithContext(ctx, f.b.Subject(tools.SubjectList), []byte(`not json`))
	if err != nil {
		t.Fatal(err)
	}
	if e := rpc.ReplyError(msg); e == nil || e.Code != rpc.CodeBadRequest || e.Message != bad.Error {
		t.Errorf("bad request headers: got %+v, want code 400 and %q", e, bad.Error)
	}
}

// TestNewClientOldRunner: ListRemote and StatusRemote read a runner from
// before micro, including the error it put only in the body.
func TestNewClientOldRunner(t *testing.T) {
	t.Parallel()
	b := bustest.Embedded(t)
	var answered atomic.Int32
	oldServe(t, b.Conn(), b.Prefix(), &answered)
	nc := bustest.Connect(t, b).Conn()
	list, err := tools.ListRemote(t.Context(), nc, b.Prefix(), "agent")
	if err != nil || len(list) != 1 || list[0].Name != "old.echo" {
		t.Errorf("list: got %+v, %v; want old.echo", list, err)
	}
	var e *rpc.Error
	if _, err := tools.ListRemote(t.Context(), nc, b.Prefix(), "broken"); !errors.As(err, &e) || e.Code != rpc.CodeBadRequest || e.Message != "bad request: unexpected end of JSON input" {
		t.Errorf("error in the body: got %v, want an *rpc.Error with the body's message", err)
	}
	st, err := tools.StatusRemote(t.Context(), nc, b.Prefix())
	if err != nil || len(st.Servers) != 1 || st.Servers[0].Name != "old" {
		t.Errorf("status: got %+v, %v", st, err)
	}
}

// TestRollingRestart: an old and a new runner side by side share the queue
// group, so each request is answered by exactly one of them.
func TestRollingRestart(t *testing.T) {
	t.Parallel()
	f := start(t)
	var old atomic.Int32
	oldServe(t, bustest.Connect(t, f.b).Conn(), f.b.Prefix(), &old)
	nc := bustest.Connect(t, f.b).Conn()
	const n = 40
	fromOld := 0
	for range n {
		list, err := tools.ListRemote(t.Context(), nc, f.b.Prefix(), "agent")
		if err != nil || len(list) == 0 {
			t.Fatalf("list: got %+v, %v", list, err)
		}
		if list[0].Name == "old.echo" {
			fromOld++
		}
	}
	// micro counts a request after its handler returned, which may be after
	// the client has its reply: poll until the count settles.
	newList := 0
	testenv.WaitFor(t, 10*time.Second, "the new runner's request count to settle", func() bool {
		runners := discover(t, nc, f.b.Prefix())
		for _, ep := range runners.Stats.Endpoints {
			if ep.Name == "list" {
				newList = ep.NumRequests
			}
		}
		return fromOld+newList >= n
	})
	if int(old.Load()) != fromOld || fromOld+newList != n {
		t.Errorf("old runner answered %d (%d seen by the client), new runner %d; want %d in all, each once", old.Load(), fromOld, newList, n)
	}
}

// discover returns the one tool runner instance $SRV knows of.
func discover(t *testing.T, nc *nats.Conn, prefix string) rpc.Instance {
	t.Helper()
	found, err := rpc.Discover(t.Context(), nc, prefix, time.Second)
	if err != nil || len(found) != 1 || found[0].Info.Name != tools.ServiceName || found[0].Stats == nil {
		t.Fatalf("discover: got %+v, %v; want one %s with stats", found, err, tools.ServiceName)
	}
	return found[0]
}

// TestRunnerServiceLifecycle: while Run runs, $SRV discovers the runner's
// endpoints on the prefixed subjects; once it returned, nothing answers and
// a client says which command to start.
func TestRunnerServiceLifecycle(t *testing.T) {
	t.Parallel()
	f := start(t)
	nc := bustest.Connect(t, f.b).Conn()
	info := discover(t, nc, f.b.Prefix()).Info
	got := map[string]string{}
	for _, ep := range info.Endpoints {
		// refresh reaches every instance, cancel-owned is this instance's
		// own subject: no queue group.
		own := ep.Name == "refresh" || ep.Name == "cancel-owned"
		if want := tools.QueueGroup; !own && ep.QueueGroup != want || own && ep.QueueGroup != "" {
			t.Errorf("endpoint %s: queue group %q", ep.Name, ep.QueueGroup)
		}
		got[ep.Name] = ep.Subject
	}
	if len(got) != 7 || got["validate"] != f.b.Subject(tools.SubjectValidate) || got["list"] != f.b.Subject(tools.SubjectList) || got["status"] != f.b.Subject(tools.SubjectStatus) ||
		got["refresh"] != f.b.Subject(tools.SubjectRefresh) || got["active"] != f.b.Subject(tools.SubjectActive) ||
		got["cancel"] != f.b.Subject(tools.SubjectCancel) || got["cancel-owned"] != f.b.Subject(tools.SubjectCancel)+"."+f.svc.Runner().ID() ||
		info.Metadata[rpc.MetadataPrefix] != f.b.Prefix() {
		t.Errorf("info: got %+v", info)
	}

	f.stop()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if _, err := nc.RequestWithContext(ctx, "$SRV.PING."+tools.ServiceName, nil); !errors.Is(err, nats.ErrNoResponders) {
		t.Errorf("ping after Run returned: got %v, want no responders", err)
	}
	_, err := tools.ListRemote(ctx, nc, f.b.Prefix(), "agent")
	want := "no tool runner answering on " + f.b.Subject(tools.SubjectList) + ": is `relay toolrunner` or `relay serve` running?"
	if !errors.Is(err, tools.ErrNoRunner) || err.Error() != want {
		t.Errorf("list without a runner: got %v, want %q", err, want)
	}
}

// TestRefreshReachesEveryRunner: `relay mcp refresh` (RefreshRemote) drops
// the cached tool list in every runner instance on the bus, not only in the
// one that answers; an unknown server is an error naming it.
func TestRefreshReachesEveryRunner(t *testing.T) {
	t.Parallel()
	var names atomic.Pointer[[]string]
	names.Store(&[]string{"one"})
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server {
		s := mcp.NewServer(&mcp.Implementation{Name: "versioned", Version: "1"}, nil)
		for _, n := range *names.Load() {
			mcp.AddTool(s, &mcp.Tool{Name: n}, func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
				return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: n}}}, nil, nil
			})
		}
		return s
	}, &mcp.StreamableHTTPOptions{Stateless: true}) // stateless: no list_changed notifications
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	b := bustest.Embedded(t)
	pol := toolstest.Policy(t, "roles:\n  - role: agent\n    capabilities: ['v.*']\n")
	var runners []*Service
	for range 2 {
		svc, err := New(t.Context(), Config{Logger: testenv.Logger(t, slog.LevelWarn), Tools: tools.Config{
			Servers: []mcpconfig.Server{{Name: "v", Type: mcpconfig.HTTP, URL: srv.URL, ProtocolVersion: mcpconfig.DefaultProtocolVersion}},
			Policy:  pol, AuditPath: filepath.Join(t.TempDir(), "tools.jsonl"),
		}}, b)
		if err != nil {
			t.Fatal(err)
		}
		testenv.Go(t, "Run", svc.Run)
		runners = append(runners, svc)
	}
	toolsOf := func(svc *Service) []string {
		var out []string
		for _, i := range svc.Runner().Tools(t.Context(), "agent") {
			out = append(out, i.Name)
		}
		return out
	}
	for i, svc := range runners {
		testenv.WaitFor(t, 20*time.Second, "runner ready", func() bool { return svc.Runner().Servers()[0].State == tools.StateReady })
		if got := toolsOf(svc); !slices.Equal(got, []string{"v.one"}) {
			t.Fatalf("runner %d: got %v, want [v.one]", i, got)
		}
	}
	names.Store(&[]string{"two"})
	for i, svc := range runners {
		if got := toolsOf(svc); !slices.Equal(got, []string{"v.one"}) {
			t.Fatalf("runner %d before the refresh: got %v, want the cached [v.one]", i, got)
		}
	}
	nc := bustest.Connect(t, b).Conn()
	// Both instances subscribe before Run's service is up; wait for both.
	testenv.WaitFor(t, 10*time.Second, "two runner instances", func() bool {
		found, err := rpc.Discover(t.Context(), nc, b.Prefix(), 200*time.Millisecond)
		return err == nil && len(found) == 2
	})
	got, err := tools.RefreshRemote(t.Context(), nc, b.Prefix(), "")
	if err != nil || !slices.Equal(got, []string{"v"}) {
		t.Fatalf("refresh: got %v, %v; want [v]", got, err)
	}
	// The answer is the first runner's; the other handles the same request.
	for i, svc := range runners {
		testenv.WaitFor(t, 10*time.Second, fmt.Sprintf("runner %d to list v.two", i), func() bool {
			return slices.Equal(toolsOf(svc), []string{"v.two"})
		})
	}
	var re *rpc.Error
	if _, err := tools.RefreshRemote(t.Context(), nc, b.Prefix(), "nosuch"); !errors.As(err, &re) || !strings.Contains(err.Error(), `"nosuch"`) {
		t.Errorf("refresh of an unknown server: got %v, want an *rpc.Error naming it", err)
	}
}
