"""The admission queue: which gated pods quota admits now (plan), and the writes (reconcile)."""
