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
// map[string][]string). Empty fields are left out. The values share one
// allocation.
func EncodeHeader(e *Envelope, h map[string][]string) {
	vals := make([]string, len(headerKeys))
	vals[0], vals[1], vals[2] = e.ID, e.Meta.Thread, e.Meta.TaskID
	vals[3], vals[4], vals[5] = string(e.Channel), string(e.Role), e.Meta.MCPVersion
	if e.Meta.Source != nil {
		vals[6] = e.Meta.Source.DeliveryID
	}
	for i, k := range headerKeys {
		if vals[i] != "" {
			h[k] = vals[i : i+1 : i+1]
		}
	}
}

// headerKeys are the header names EncodeHeader writes, in its order.
var headerKeys = [...]string{HeaderID, HeaderThread, HeaderTask, HeaderChannel, HeaderRole, HeaderVersion, HeaderDelivery}

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
