package agent

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/relaystation/relay/envelope"
)

// cloneFixture is a task with every field that clone copies set.
func cloneFixture() *Task {
	now := time.Now().UTC().Truncate(time.Second)
	return &Task{
		ID: "t1", Status: StatusWaiting, Origin: envelope.New(envelope.ChannelGitHub, envelope.RoleUser, "hi"),
		Target: &envelope.Target{Channel: "github", Owner: "o", Repo: "r", Number: 1},
		Refs:   []Ref{{ID: "r1", Text: "ref"}},
		Tools:  []OfferedTool{{ToolSpec: ToolSpec{Name: "echo", Parameters: json.RawMessage(`{"type":"object"}`)}, Tool: "s.echo"}},
		Messages: append(make([]Message, 0, 8), Message{Role: "user", Content: "q"},
			Message{Role: "assistant", ToolCalls: []LLMCall{{ID: "c1", Name: "echo", Arguments: "{}"}}}),
		Calls:       []Call{{ID: "k1", LLMID: "c1", Func: "echo", Tool: "s.echo", Args: map[string]any{"m": "x"}}},
		UnknownRefs: []string{"u1"},
		Failure:     &Failure{Kind: FailBadAnswer, Reason: "r"},
		Lease:       &Lease{Owner: "a", Until: now},
		Created:     now, Updated: now,
	}
}

// TestCloneIsIndependent: a clone encodes like the task, and the changes the
// loop makes to a clone (fields, appended messages, call states, lease,
// failure, target) leave the task as it was.
func TestCloneIsIndependent(t *testing.T) {
	t.Parallel()
	orig := cloneFixture()
	before, err := json.Marshal(orig)
	if err != nil {
		t.Fatal(err)
	}
	c := orig.clone()
	if got, _ := json.Marshal(c); string(got) != string(before) {
		t.Fatalf("clone encodes as\n%s\nwant\n%s", got, before)
	}
	c.Status = StatusRunning
	c.Messages = append(c.Messages, Message{Role: "tool", Content: "out"})
	c.Messages[1].ToolCalls[0].Arguments = `{"changed":true}`
	c.Calls[0].Done, c.Calls[0].Output = true, "out"
	c.Refs[0].Text = "changed"
	c.Tools[0].Tool = "changed"
	c.UnknownRefs[0] = "changed"
	c.Lease.Owner, c.Failure.Reason, c.Target.Number = "b", "changed", 2
	if after, _ := json.Marshal(orig); string(after) != string(before) {
		t.Errorf("changing the clone changed the task:\n%s\nwant\n%s", after, before)
	}
	if full := orig.Messages[:cap(orig.Messages)][2]; full.Role != "" {
		t.Errorf("appending to the clone's messages wrote into the task's array: %+v", full)
	}
}

// BenchmarkClone: the copy the loop makes before every change of a task.
func BenchmarkClone(b *testing.B) {
	t := cloneFixture()
	for range b.N {
		_ = t.clone()
	}
}

// bigTask is cloneFixture with a long origin and a dozen offered tools, the
// size of a real task.
func bigTask() *Task {
	t := cloneFixture()
	t.Origin.Content = strings.Repeat("issue body text ", 200)
	for i := range 12 {
		t.Tools = append(t.Tools, OfferedTool{Tool: "s.t", ToolSpec: ToolSpec{Name: fmt.Sprintf("tool%d", i),
			Description: strings.Repeat("describes ", 20), Parameters: json.RawMessage(`{"properties":{"a":{"type":"string"},"b":{"type":"number"}},"required":["a"],"type":"object"}`)}})
	}
	return t
}

// TestTaskCodecMatchesEncodingJSON: the bucket's codec and encoding/json
// read each other's output to the same task.
func TestTaskCodecMatchesEncodingJSON(t *testing.T) {
	t.Parallel()
	task := bigTask()
	std, err := json.Marshal(task)
	if err != nil {
		t.Fatal(err)
	}
	ours, err := encodeTask(task)
	if err != nil {
		t.Fatal(err)
	}
	var viaStd Task
	if err := json.Unmarshal(ours, &viaStd); err != nil {
		t.Fatalf("encoding/json cannot read the codec's output: %v", err)
	}
	viaOurs, err := decodeTask(std)
	if err != nil {
		t.Fatalf("the codec cannot read encoding/json's output: %v", err)
	}
	for name, got := range map[string]*Task{"encodeTask then encoding/json": &viaStd, "encoding/json then decodeTask": viaOurs} {
		if again, _ := json.Marshal(got); string(again) != string(std) {
			t.Errorf("%s: got\n%s\nwant\n%s", name, again, std)
		}
	}
	if _, err := decodeTask([]byte(`{"id": 5}`)); err == nil {
		t.Error("decodeTask of a bad task: got nil error")
	}
}

// BenchmarkTaskCodec: the encode and decode of a task every step makes.
func BenchmarkTaskCodec(b *testing.B) {
	t := bigTask()
	for range b.N {
		raw, _ := encodeTask(t)
		_, _ = decodeTask(raw)
	}
}

// TestToolSchemasKeepTheirJSON: a task stored with its tools' parameter
// schemas as objects (as every version writes them) decodes, and encoding it
// again writes each schema as it was, which is what the model is offered.
func TestToolSchemasKeepTheirJSON(t *testing.T) {
	const schema = `{"properties":{"message":{"description":"Message to echo","type":"string"}},"required":["message"],"type":"object"}`
	stored := `{"id":"t1","status":"running","origin":null,"agent_id":"a","role":"agent","tools":[` +
		`{"name":"s__echo","description":"echoes","parameters":` + schema + `,"tool":"s.echo"},` +
		`{"name":"bare","tool":"s.bare"}],"messages":[],"step":0,"tokens":0,` +
		`"created":"2026-11-28T00:00:00Z","updated":"2026-11-28T00:00:00Z"}`
	task, err := decodeTask([]byte(stored))
	if err != nil {
		t.Fatalf("decode: %v", err)
	}
	if got := string(task.Tools[0].Parameters); got != schema {
		t.Errorf("decoded schema %s, want %s", got, schema)
	}
	if task.Tools[1].Parameters != nil {
		t.Errorf("a tool without a schema decoded with %s", task.Tools[1].Parameters)
	}
	raw, err := encodeTask(task)
	if err != nil {
		t.Fatalf("encode: %v", err)
	}
	if !strings.Contains(string(raw), `"parameters":`+schema+`,"tool":"s.echo"`) {
		t.Errorf("encoded task does not carry the schema as stored:\n%s", raw)
	}
	body, err := chatBody("m", nil, []ToolSpec{task.Tools[0].ToolSpec, task.Tools[1].ToolSpec})
	if err != nil {
		t.Fatalf("chatBody: %v", err)
	}
	for _, want := range []string{`"parameters":` + schema, `"name":"bare","parameters":{"properties":{},"type":"object"}`} {
		if !strings.Contains(string(body), want) {
			t.Errorf("request body lacks %s:\n%s", want, body)
		}
	}
}

// TestSchemaJSON: a tool's input schema is offered as its JSON object, keys
// sorted; an empty or non-object schema as none.
func TestSchemaJSON(t *testing.T) {
	for _, tc := range []struct {
		in   any
		want string
	}{
		{map[string]any{"type": "object", "properties": map[string]any{"b": map[string]any{"type": "string"}, "a": map[string]any{}}}, `{"properties":{"a":{},"b":{"type":"string"}},"type":"object"}`},
		{map[string]any{}, ""},
		{nil, ""},
		{"not an object", ""},
	} {
		if got := string(schemaJSON(tc.in)); got != tc.want {
			t.Errorf("schemaJSON(%v) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
