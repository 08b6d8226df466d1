"""The command lines: ``rolloutctl`` (:mod:`.ctl`, with the artefact, drill and eval commands in
their own modules) and ``rolloutd`` (:mod:`.daemon`). Imports stay inside the commands, so
``rolloutctl status`` loads neither the daemon nor its HTTP and scheduling libraries."""
