//! Pieces shared by the pages.

pub mod live;
pub mod status;
