// Package cli is the relay's command layer: the services `relay serve` runs,
// the operator commands (`relay dlq`, `relay mcp`, ...) and the settings they
// read. Package main calls [Run] and nothing else.
package cli
