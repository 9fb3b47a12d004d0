package cli

import (
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/relaystation/relay/config"
	"github.com/relaystation/relay/internal/story"
	"github.com/relaystation/relay/internal/testenv"
)

// trace runs `relay trace args...` against the stack's bus.
func (s *stack) trace(args ...string) (code int, stdout, stderr string) {
	var out, errb syncBuffer
	code = Run(s.t.Context(), append([]string{"trace"}, args...), config.FromMap(s.env), &out, &errb)
	return code, out.String(), errb.String()
}

// inOrder reports whether want occurs in got in this order (other kinds,
// such as audit records, may come between).
func inOrder(got, want []string) bool {
	i := 0
	for _, k := range got {
		if i < len(want) && k == want[i] {
			i++
		}
	}
	return i == len(want)
}

// TestTrace: the story of a real loop run (webhook -> model -> tool ->
// model -> suggestion -> approval -> outbound), found by delivery id,
// thread and task id, printed and as JSON.
func TestTrace(t *testing.T) {
	t.Parallel()
	testenv.SkipShort(t, "end-to-end")
	s := startStack(t, nil)
	delivery := uuid.NewString()
	s.click(e2eApprover, s.approvalPost(s.issueOpenedAs(2001, "approve", delivery)), "approve")
	c := s.exactlyOneComment(2001)
	link := fmt.Sprintf("https://github.com/%s/%s/issues/%d#issuecomment-%d", c.Owner, c.Repo, c.Number, c.ID)
	want := []string{"webhook", "model_call", "tool_call", "tool_result", "model_call", "suggestion", "approval", "outbound", "outbound"}
	var st story.Story
	defer func() {
		if t.Failed() {
			_, out, errs := s.trace(delivery)
			t.Logf("trace %s:\n%s%s", delivery, out, errs)
		}
	}()
	testenv.WaitFor(t, 10*time.Second, "the post record in the story", func() bool {
		code, out, _ := s.trace(delivery, "-json")
		st = story.Story{}
		return code == 0 && json.Unmarshal([]byte(out), &st) == nil && inOrder(storyKinds(&st), want)
	})
	// The last outbound hop is the post, with the comment's link (audit
	// records may come after it).
	var post story.Hop
	for _, h := range st.Hops {
		if h.Kind == story.KindOutbound {
			post = h
		}
	}
	if post.Link != link {
		t.Errorf("last outbound hop: got link %q, want %q", post.Link, link)
	}
	for _, id := range []string{st.Thread, st.Tasks[0]} {
		code, out, stderr := s.trace(id)
		if code != 0 {
			t.Fatalf("trace %s: exit %d: %s", id, code, stderr)
		}
		checkTraceText(t, out, want, link)
		if !strings.Contains(stderr, "nats") {
			t.Errorf("trace %s: stderr does not name the NATS server: %q", id, stderr)
		}
	}
	code, _, stderr := s.trace("no-such-delivery")
	if code != 1 || !strings.Contains(stderr, `no delivery, thread or task matches "no-such-delivery"`) {
		t.Errorf("unknown id: got exit %d, stderr %q", code, stderr)
	}
}

func storyKinds(st *story.Story) []string {
	var k []string
	for _, h := range st.Hops {
		k = append(k, h.Kind)
	}
	return k
}

var hopLine = regexp.MustCompile(`^(\d\d:\d\d:\d\d\.\d{3}) +\+(\S+) +(\S+) +(.+?) +(\S+)$`)

// checkTraceText checks the terminal form: a header, one line per hop with
// time, +delta, kind, summary and link, then the story's line.
func checkTraceText(t *testing.T, out string, want []string, link string) {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) < 2+len(want) || !strings.HasPrefix(lines[0], "TIME") ||
		!strings.HasPrefix(lines[len(lines)-1], "story of ") {
		t.Fatalf("got output:\n%s", out)
	}
	var kinds []string
	for _, l := range lines[1 : len(lines)-1] {
		m := hopLine.FindStringSubmatch(l)
		if m == nil {
			t.Fatalf("hop line %q does not read time +delta kind summary link", l)
		}
		kinds = append(kinds, m[3])
	}
	if !inOrder(kinds, want) {
		t.Errorf("got kinds %v, want %v in order", kinds, want)
	}
	if !slices.ContainsFunc(lines, func(l string) bool { return strings.HasSuffix(l, " "+link) }) {
		t.Errorf("no hop links the comment %s:\n%s", link, out)
	}
}
