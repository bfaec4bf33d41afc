package client

// Queued returns how many calls wait in the client's batcher (for the
// batching tests).
func (c *Client) Queued() int {
	c.batch.mu.Lock()
	defer c.batch.mu.Unlock()
	return len(c.batch.queue)
}
