package camera

// Sessions lists the time-to-stream records of the viewing sessions of room.
func Sessions(room string) []any { return []any{} }
