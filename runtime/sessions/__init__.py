"""Sessions: lifecycle (manager), the call path (calls), uploads and downloads (transfers)."""
