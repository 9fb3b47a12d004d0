package envelope_test

import (
	"errors"
	"fmt"
	"time"

	"github.com/relaystation/relay/envelope"
)

// Build an envelope, validate it against the schema, encode it for the bus
// and parse it back. A reply continues the same thread and task.
func Example() {
	e := envelope.New(envelope.ChannelGitHub, envelope.RoleUser, "Please fix the typo in README.md")
	e.Meta.Thread = envelope.GitHubThread("octo", "hello", 7)
	e.Meta.TaskID = "task-1"
	e.Meta.Source = &envelope.Source{Event: "issues", Action: "opened", DeliveryID: "d-1"}
	if err := envelope.Validate(e); err != nil {
		fmt.Println(err)
		return
	}

	// New gives a fresh UUID and the current time; fix both so the output
	// below stays the same.
	e.ID = "0b7e3f7c-9a4e-4b8e-9f1d-2c6a5d4e3f21"
	e.Timestamp = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	data, err := e.Marshal()
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(string(data))

	back, err := envelope.Parse(data)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(envelope.Inbound(back.Channel, back.Meta.Source.Event), back.Meta.Thread)

	r := back.Reply(envelope.ChannelGitHub, envelope.RoleAssistant, "Fixed in #8.")
	fmt.Println(r.Role, r.Meta.Thread, r.Meta.TaskID)
	// Output:
	// {"id":"0b7e3f7c-9a4e-4b8e-9f1d-2c6a5d4e3f21","timestamp":"2026-01-02T03:04:05Z","channel":"github","role":"user","content":"Please fix the typo in README.md","meta":{"mcp_version":"1.0.0","thread":"github:octo/hello#7","task_id":"task-1","source":{"event":"issues","action":"opened","delivery_id":"d-1"}}}
	// in.github.issues github:octo/hello#7
	// assistant github:octo/hello#7 task-1
}

// Parse refuses JSON that breaks the schema with a *ValidationError naming
// the field.
func ExampleParse_invalid() {
	_, err := envelope.Parse([]byte(`{"id":"0b7e3f7c-9a4e-4b8e-9f1d-2c6a5d4e3f21","timestamp":"2026-01-02T03:04:05Z","channel":"fax","role":"user","content":"hi"}`))
	var verr *envelope.ValidationError
	fmt.Println(errors.As(err, &verr), verr.Field)
	// Output:
	// true /channel
}
