package envelope

// NATS headers that mirror a few envelope fields, so routers and operators can
// see them without decoding the body. The body stays the source of truth.
const (
	HeaderID      = "Relay-Envelope-Id"
	HeaderThread  = "Relay-Thread"
	HeaderTask    = "Relay-Task-Id"
	HeaderChannel = "Relay-Channel"
	HeaderRole    = "Relay-Role"
	HeaderVersion = "Relay-Mcp-Version"
	// HeaderDelivery is meta.source.delivery_id: the provider's delivery id
	// of the webhook the envelope came from (or answers), so `relay trace`
	// finds a delivery's story by scanning headers only.
	HeaderDelivery = "Relay-Delivery-Id"
)

// EncodeHeader writes e's header fields into h (a nats.Header or any
// map[string][]string). Empty fields are left out.
func EncodeHeader(e *Envelope, h map[string][]string) {
	set := func(k, v string) {
		if v != "" {
			h[k] = []string{v}
		}
	}
	set(HeaderID, e.ID)
	set(HeaderThread, e.Meta.Thread)
	set(HeaderTask, e.Meta.TaskID)
	set(HeaderChannel, string(e.Channel))
	set(HeaderRole, string(e.Role))
	set(HeaderVersion, e.Meta.MCPVersion)
	if e.Meta.Source != nil {
		set(HeaderDelivery, e.Meta.Source.DeliveryID)
	}
}

// HeaderFields is what a header carries about an envelope.
type HeaderFields struct {
	ID, Thread, TaskID, Version string
	Delivery                    string
	Channel                     Channel
	Role                        Role
}

// DecodeHeader reads the fields EncodeHeader wrote.
func DecodeHeader(h map[string][]string) HeaderFields {
	get := func(k string) string {
		if v := h[k]; len(v) > 0 {
			return v[0]
		}
		return ""
	}
	return HeaderFields{
		ID:       get(HeaderID),
		Thread:   get(HeaderThread),
		TaskID:   get(HeaderTask),
		Version:  get(HeaderVersion),
		Delivery: get(HeaderDelivery),
		Channel:  Channel(get(HeaderChannel)),
		Role:     Role(get(HeaderRole)),
	}
}
