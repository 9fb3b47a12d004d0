package hooks

// CachedRoles is how many roles' tool lists s has cached (for tests).
func CachedRoles(s *Service) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.catalog)
}

// HookCallID is hookCallID (for tests).
func HookCallID(callID string) string { return hookCallID(callID) }
