-- What the user's password was when the session was made (a digest of
-- its hash): a session made with an older password ends when the users
-- file gives the user a new one. NULL for sessions made before this
-- migration, or by an older replica; those last until they expire.
ALTER TABLE session ADD COLUMN credential TEXT;
