"""The server itself: boot checks, shared-experts fusion engagement, routed-experts probe."""
