//! One module per page; each holds the server functions it calls.

pub mod plans;
