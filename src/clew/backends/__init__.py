"""Storage backends behind one seam (:class:`clew.protocols.Backend`)."""
